import { type ChildProcess, spawn } from 'node:child_process';
import { StdioTransport } from '@tether/jsonrpc';
import type { Dialer } from './client-options.js';
import { TetherError } from './errors.js';

/**
 * The dial of `connectStdio`: starts `command` (an executor speaking JSON-RPC on its stdin/stdout) and talks to
 * it over its pipes. `child()` is the process started, `kill()` ends it when the connect failed.
 */
export function stdioDialer(
  command: string[],
  options: { env?: NodeJS.ProcessEnv; cwd?: string },
): { dial: Dialer; child(): ChildProcess | null; kill(): void } {
  if (command.length === 0) throw new TetherError('invalid_argument', 'connectStdio needs a command');
  let child: ChildProcess | null = null;
  return {
    dial: async () => {
      const spawned = spawn(command[0]!, command.slice(1), {
        stdio: ['pipe', 'pipe', 'inherit'],
        ...(options.env ? { env: options.env } : {}),
        ...(options.cwd ? { cwd: options.cwd } : {}),
      });
      child = spawned;
      await new Promise<void>((resolve, reject) => {
        spawned.once('spawn', resolve);
        spawned.once('error', (err) =>
          reject(new TetherError('connect_failed', `cannot start ${command[0]}: ${err.message}`, { cause: err })),
        );
      });
      return new StdioTransport({ input: spawned.stdout!, output: spawned.stdin!, label: `stdio ${command[0]}` });
    },
    child: () => child,
    kill: () => {
      const started = child as ChildProcess | null;
      if (started && started.exitCode === null && started.signalCode === null) started.kill('SIGKILL');
    },
  };
}
