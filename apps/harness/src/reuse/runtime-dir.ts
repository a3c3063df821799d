import { isAbsolute, join } from 'node:path';

/**
 * Where a user's connection masters and their warm processes keep their sockets. Its own module, without
 * dependencies: dist/main.js reads it before the CLI bundle is loaded (src/warm.ts).
 */

/** `$XDG_RUNTIME_DIR/tether` when that is an absolute path, else `/tmp/tether-$UID`. */
export function runtimeDir(env: NodeJS.ProcessEnv): string {
  const xdg = env.XDG_RUNTIME_DIR;
  if (xdg && isAbsolute(xdg)) return join(xdg, 'tether');
  return `/tmp/tether-${process.getuid?.() ?? -1}`;
}

/** A master's warm process listens at `<runtime dir>/<master name>.warm.sock`. */
export const WARM_SOCKET_SUFFIX = '.warm.sock';
