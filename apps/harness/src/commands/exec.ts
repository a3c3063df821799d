import type { Environment } from '@tether/client';
import type { Command } from 'commander';
import { type CliIo, connectOptions, keyValue, type SetExit, withEnvironment } from '../common.js';
import type { ConnectFlags } from '../target.js';

export function registerExec(program: Command, io: CliIo, setExit: SetExit): void {
  connectOptions(
    program
      .command('exec')
      .description('run a command on the environment; its output streams here and its exit code becomes ours')
      .argument('<command...>', 'program and arguments (put -- before them)')
      .option('-t, --tty', 'run in a pseudo-terminal (interactive when stdin is a terminal)', false)
      .option('-i, --interactive', 'forward stdin to the process', false)
      .option('--cwd <dir>', 'absolute working directory on the environment (default /)')
      .option('-e, --env <NAME=VALUE>', 'set a variable (repeatable)', keyValue, {})
      .option('--clean-env', 'start from an empty environment instead of the executor\u2019s', false),
  ).action(async (argv: string[], options: ConnectFlags & ExecFlags) => {
    setExit(await withEnvironment(io, options, undefined, (env) => execCommand(env, argv, options, io)));
  });
}

interface ExecFlags {
  tty: boolean;
  interactive: boolean;
  cwd?: string;
  env: Record<string, string>;
  cleanEnv: boolean;
}

/** Stdin bytes sent to the process and not yet answered, at most (the executor's stdin queue: 1 MiB). */
const STDIN_UNANSWERED_BYTES = 1024 * 1024;

async function execCommand(env: Environment, argv: string[], options: ExecFlags, io: CliIo): Promise<number> {
  const forwardStdin = options.interactive || (options.tty && io.stdin.isTTY === true);
  const handle = await env.spawn(argv, {
    ...(options.cwd ? { cwd: options.cwd } : {}),
    env: options.env,
    inheritEnv: !options.cleanEnv,
    tty: options.tty,
    stdin: forwardStdin,
    ...(options.tty && io.stdout.rows && io.stdout.columns
      ? { size: { rows: io.stdout.rows, cols: io.stdout.columns } }
      : {}),
  });
  const cleanups: Array<() => void> = [];
  if (forwardStdin) {
    if (options.tty && io.stdin.isTTY) io.stdin.setRawMode?.(true);
    // Writes are pipelined, in order (the executor applies them in the order they arrive), with at most
    // STDIN_UNANSWERED_BYTES unanswered: stdin pauses beyond it, so memory stays bounded whatever is piped
    // in, and the executor, which queues up to 1 MiB for a child that reads slowly, never has to refuse
    // one. One write at a time would wait a round trip through the relay per 64 KiB. The close follows
    // the last write's answer.
    const writes = new Set<Promise<void>>();
    let unanswered = 0;
    let stopped = false;
    const stop = () => {
      stopped = true;
      io.stdin.off('data', onData);
    };
    const onData = (chunk: Buffer) => {
      if (stopped) return;
      unanswered += chunk.byteLength;
      const write: Promise<void> = handle
        .write(chunk)
        .then((status) => {
          if (status !== 'accepted') stop();
        })
        .catch(stop)
        .finally(() => {
          writes.delete(write);
          unanswered -= chunk.byteLength;
          if (!stopped && unanswered < STDIN_UNANSWERED_BYTES && io.stdin.isPaused()) io.stdin.resume();
        });
      writes.add(write);
      if (unanswered >= STDIN_UNANSWERED_BYTES) io.stdin.pause();
    };
    const onEnd = () => {
      void Promise.all(writes)
        .then(() => (stopped ? undefined : handle.closeStdin()))
        .catch(() => undefined);
    };
    io.stdin.on('data', onData);
    io.stdin.once('end', onEnd);
    cleanups.push(() => {
      io.stdin.off('data', onData);
      io.stdin.off('end', onEnd);
      if (options.tty && io.stdin.isTTY) io.stdin.setRawMode?.(false);
      io.stdin.pause();
    });
  }
  const onSigint = () => void handle.signal('interrupt').catch(() => undefined);
  process.on('SIGINT', onSigint);
  cleanups.push(() => process.off('SIGINT', onSigint));
  try {
    for await (const event of handle) {
      if (event.kind !== 'output') continue;
      const sink = event.stream === 'stderr' ? io.stderr : io.stdout;
      if (!sink.write(event.chunk)) await new Promise((resolve) => sink.once('drain', resolve));
    }
    return (await handle.completion).exitCode;
  } finally {
    for (const cleanup of cleanups) cleanup();
  }
}
