import { lstatSync } from 'node:fs';
import { isAbsolute, join } from 'node:path';

/**
 * What connection reuse reads before anything else: where a user's masters and their warm processes keep
 * their sockets, whether those are the user's own, and `TETHER_REUSE`. Its own module, without dependencies:
 * dist/main.js reads it before the CLI bundle is loaded (src/warm.ts), and the bundle's reuse code through it.
 */

export const REUSE_ENV = 'TETHER_REUSE';
export type ReuseMode = 'no' | 'use' | 'auto';

/** `TETHER_REUSE`: `no` (also `0`, `false`, `off`), `use` (the default), `auto`; null for anything else. */
export function reuseSetting(env: NodeJS.ProcessEnv): ReuseMode | null {
  const value = env[REUSE_ENV]?.trim().toLowerCase() || 'use';
  if (value === 'no' || value === 'use' || value === 'auto') return value;
  if (value === '0' || value === 'false' || value === 'off') return 'no';
  return null;
}

/** `$XDG_RUNTIME_DIR/tether` when that is an absolute path, else `/tmp/tether-$UID`. */
export function runtimeDir(env: NodeJS.ProcessEnv): string {
  const xdg = env.XDG_RUNTIME_DIR;
  if (xdg && isAbsolute(xdg)) return join(xdg, 'tether');
  return `/tmp/tether-${process.getuid?.() ?? -1}`;
}

/** A master's warm process listens at `<runtime dir>/<master name>.warm.sock`. */
export const WARM_SOCKET_SUFFIX = '.warm.sock';

/**
 * Why `path` (lstat'ed, not followed) is not this user's private `kind` (no group or other permission bits),
 * or null when it is. Throws lstat's error (ENOENT for an absent one).
 */
export function ownershipProblem(path: string, kind: 'directory' | 'socket'): string | null {
  const stat = lstatSync(path);
  const uid = process.getuid?.() ?? -1;
  const isKind = kind === 'directory' ? stat.isDirectory() : stat.isSocket();
  if (!isKind) return `${path} is not a ${kind}`;
  if (stat.uid !== uid) return `${path} belongs to uid ${stat.uid}, not to this user (${uid})`;
  if ((stat.mode & 0o077) !== 0) return `${path} is open to other users (mode ${(stat.mode & 0o777).toString(8)})`;
  return null;
}
