import { spawn } from 'node:child_process';

/** What a command left when it ended. */
export interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** Written to its stdin, which is then closed; without it (or `stdinFd`) stdin is closed from the start. */
  input?: string | Buffer;
  /** A descriptor of ours the command gets as its stdin, as a shell's `< file` gives it (not with `input`). */
  stdinFd?: number;
  /** SIGKILL after this long (the result then shows the signal). Default 60 s. */
  timeoutMs?: number;
}

/**
 * Runs a command to its end and gives back its exit code and all it printed: the shape every black-box test
 * of a CLI needs. Output is kept whole (for commands that print little); stdout as bytes.
 */
export function runToEndBytes(
  command: string,
  args: readonly string[],
  options: RunOptions = {},
): Promise<Omit<RunResult, 'stdout'> & { stdout: Buffer }> {
  const child = spawn(command, args, {
    cwd: options.cwd,
    env: options.env ?? process.env,
    stdio: [options.stdinFd ?? (options.input === undefined ? 'ignore' : 'pipe'), 'pipe', 'pipe'],
  });
  const stdout: Buffer[] = [];
  const stderr: Buffer[] = [];
  child.stdout?.on('data', (d: Buffer) => stdout.push(d));
  child.stderr?.on('data', (d: Buffer) => stderr.push(d));
  if (options.input !== undefined) child.stdin?.end(options.input);
  const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 60_000);
  return new Promise((resolve, reject) => {
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout: Buffer.concat(stdout), stderr: Buffer.concat(stderr).toString() });
    });
  });
}

/** `runToEndBytes` with stdout as text. */
export async function runToEnd(command: string, args: readonly string[], options: RunOptions = {}): Promise<RunResult> {
  const result = await runToEndBytes(command, args, options);
  return { ...result, stdout: result.stdout.toString() };
}
