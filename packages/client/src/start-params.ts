import type { ProcessStartParams } from '@tether/exec-protocol';
import type { StartOptions } from './backend.js';
import { TetherError } from './errors.js';
import { toFileUri } from './fs.js';
import { managedNetworkParams } from './network.js';

/** The Codex `process/start` params of a start (what every start sends; extensions are added by the caller). */
export function processStartParams(options: Omit<StartOptions, 'flowWindowBytes'>): ProcessStartParams {
  return {
    processId: options.processId,
    argv: options.argv,
    cwd: pathToUri(options.cwd),
    env: options.inheritEnv ? {} : options.env,
    ...(options.inheritEnv
      ? // The executor's default excludes (*KEY*, *SECRET*, *TOKEN*) stay on: its secrets are not the child's.
        {
          envPolicy: { inherit: 'all', ignoreDefaultExcludes: false, exclude: [], set: options.env, includeOnly: [] },
        }
      : {}),
    tty: options.tty,
    pipeStdin: options.pipeStdin,
    arg0: options.arg0 ?? null,
    ...(options.size ? { size: options.size } : {}),
    ...(options.network
      ? managedNetworkParams(options.network, options.processId, options.sandbox)
      : options.sandbox
        ? { sandbox: options.sandbox }
        : {}),
  };
}

function pathToUri(path: string): string {
  if (!path.startsWith('/')) throw new TetherError('invalid_argument', `cwd must be an absolute path: ${path}`);
  return toFileUri(path);
}
