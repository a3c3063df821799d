import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { run } from '../cli.js';

export interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * The harness CLI run in this process (`run` with in-memory stdio), with no config file unless a test names one
 * (never the user's ~/.config/tether/config.toml): `work` holds the missing one.
 */
export function cliRunner(work: string) {
  return async function harness(
    args: string[],
    env: NodeJS.ProcessEnv,
    stdinText?: string,
    options: { stderrIsTTY?: boolean } = {},
  ): Promise<Outcome> {
    const stdin = new PassThrough();
    const stdout = new PassThrough();
    const stderr = Object.assign(new PassThrough(), { isTTY: options.stderrIsTTY ?? false });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    stdout.on('data', (chunk: Buffer) => out.push(chunk));
    stderr.on('data', (chunk: Buffer) => err.push(chunk));
    if (stdinText !== undefined) stdin.end(stdinText);
    const code = await run(args, {
      stdin,
      stdout,
      stderr,
      env: { TETHER_CONFIG: join(work, 'no-config.toml'), ...env },
    });
    return { code, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() };
  };
}
