import type { Readable, Writable } from 'node:stream';
import { type Environment, LocalFs, TetherError } from '@tether/client';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { copy, type Endpoint } from './copy.js';
import { type ConnectFlags, ENV, type Location, openEnvironment, parseLocation } from './target.js';

export interface CliIo {
  stdin: Readable & { isTTY?: boolean; setRawMode?: (raw: boolean) => unknown };
  stdout: Writable & { isTTY?: boolean; columns?: number; rows?: number };
  stderr: Writable & { isTTY?: boolean };
  env: NodeJS.ProcessEnv;
}

export const VERSION = '0.1.0';

function keyValue(value: string, previous: Record<string, string> = {}): Record<string, string> {
  const eq = value.indexOf('=');
  if (eq <= 0) throw new InvalidArgumentError(`expected NAME=VALUE, got ${JSON.stringify(value)}`);
  return { ...previous, [value.slice(0, eq)]: value.slice(eq + 1) };
}

function connectOptions(command: Command): Command {
  return command
    .addOption(new Option('--registry <url>', `registry base URL (env ${ENV.registry})`))
    .addOption(new Option('--environment-id <id>', `environment to use (env ${ENV.environmentId})`))
    .addOption(new Option('--url <ws-url>', `talk to an executor's WebSocket directly instead (env ${ENV.url})`))
    .addOption(
      new Option(
        '--connect-timeout <seconds>',
        `give up connecting after this long; failures that may pass are retried until then (env ${ENV.connectTimeout}, default 20)`,
      ).argParser(parseSeconds),
    )
    .addOption(
      new Option(
        '--allow-insecure-registry',
        `allow a plain http:// registry that is not loopback: the API key and bundle cross the network in clear (env ${ENV.allowInsecureRegistry}=1)`,
      ),
    )
    .addOption(
      new Option(
        '--executor-key <file>',
        `trust only this executor public key (NoiseChannelPublicKey JSON) for the environment (env ${ENV.executorKey})`,
      ),
    );
}

/** Control characters (a remote side's names may hold terminal escapes) shown as `?` on a terminal. */
function printable(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, '?');
}

function parseSeconds(value: string): number {
  const seconds = Number(value);
  if (!/^\d+(\.\d+)?$/.test(value.trim()) || !(seconds > 0) || seconds > 3600) {
    throw new InvalidArgumentError(`expected seconds between 0 and 3600, got ${JSON.stringify(value)}`);
  }
  return seconds;
}

function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(1)} ${units[unit]}`;
}

/** Builds the program; `run` gives each action its IO and collects the exit code. */
export function buildProgram(io: CliIo, setExit: (code: number) => void): Command {
  const program = new Command('harness')
    .description(
      'Tether harness: run processes and move files on an environment, end-to-end encrypted through the relay.',
    )
    .version(VERSION)
    .showHelpAfterError()
    .configureOutput({
      writeOut: (text) => io.stdout.write(text),
      writeErr: (text) => io.stderr.write(text),
    })
    .exitOverride()
    .addHelpText(
      'after',
      `
Connection: --registry URL and --environment-id ID (or ${ENV.registry}, ${ENV.environmentId}), with a
harness API key in ${ENV.apiKey}. --url ws://HOST:PORT talks to an executor directly (no relay; then
ENV:/path names a path on that executor). Connecting is retried with backoff for up to 20 s
(--connect-timeout) after failures that may pass; a refused key or an unknown environment fails at once.
Remote paths are written ENV:/absolute/path.

Security: an http:// registry must be on loopback (127.0.0.0/8, ::1, localhost) unless
--allow-insecure-registry (${ENV.allowInsecureRegistry}=1); use https:// otherwise. The executor's key is
pinned for the session: a reconnect to another key fails. A copy from an environment refuses entry names
that are not one path component and never writes outside the destination or through a symbolic link in it.

Examples:
  harness exec -- uname -a
  harness exec --tty -- bash
  harness cp ./build.tar.gz dev-1:/tmp/build.tar.gz
  harness cp -r dev-1:/var/log/app ./logs
  harness ls dev-1:/tmp
  harness cat dev-1:/etc/hostname`,
    );

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

  connectOptions(
    program
      .command('cp')
      .description('copy files or directories between here and environments (ENV:/path); verified by sha256')
      .argument('<source>', 'local path or ENV:/path')
      .argument('<destination>', 'local path or ENV:/path (an existing directory receives the source inside it)')
      .option('-r, --recursive', 'copy directories', false)
      .option('-q, --quiet', 'no progress or summary', false),
  ).action(
    async (source: string, destination: string, options: ConnectFlags & { recursive: boolean; quiet: boolean }) => {
      setExit(await cpCommand(source, destination, options, io));
    },
  );

  connectOptions(
    program
      .command('ls')
      .description('list a directory on an environment')
      .argument('<location>', 'ENV:/path or a local path'),
  ).action(async (location: string, options: ConnectFlags) => {
    setExit(
      await withLocation(io, options, location, async (fs, path) => {
        const meta = await fs.getMetadata(path);
        if (!meta.isDirectory) {
          io.stdout.write(`${path}\n`);
          return 0;
        }
        const entries = (await fs.readDirectory(path)).sort((a, b) => a.fileName.localeCompare(b.fileName));
        const show = io.stdout.isTTY ? printable : (name: string) => name;
        for (const entry of entries) io.stdout.write(`${show(entry.fileName)}${entry.isDirectory ? '/' : ''}\n`);
        return 0;
      }),
    );
  });

  connectOptions(
    program
      .command('cat')
      .description('print a file from an environment')
      .argument('<location>', 'ENV:/path or a local path'),
  ).action(async (location: string, options: ConnectFlags) => {
    setExit(
      await withLocation(io, options, location, async (fs, path) => {
        for await (const chunk of fs.createReadStream(path)) {
          if (!io.stdout.write(chunk as Buffer)) await new Promise((resolve) => io.stdout.once('drain', resolve));
        }
        return 0;
      }),
    );
  });

  return program;
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

async function cpCommand(
  sourceText: string,
  destinationText: string,
  options: ConnectFlags & { recursive: boolean; quiet: boolean },
  io: CliIo,
): Promise<number> {
  const opened = new Map<string, Environment>();
  const started = Date.now();
  try {
    const endpoint = async (location: Location, text: string): Promise<Endpoint> => {
      if (location.kind === 'local') return { fs: new LocalFs(), env: null, path: location.path, label: text };
      let env = opened.get(location.environmentId);
      if (!env) {
        env = await openEnvironment(options, io.env, location.environmentId);
        opened.set(location.environmentId, env);
      }
      return { fs: env.fs, env, path: location.path, label: text };
    };
    const from = parseLocation(sourceText);
    const to = parseLocation(destinationText);
    if (options.url && from.kind === 'remote' && to.kind === 'remote' && from.environmentId !== to.environmentId) {
      throw new TetherError(
        'invalid_argument',
        '--url reaches one executor; a copy between two environments goes through the registry (drop --url)',
      );
    }
    const source = await endpoint(from, sourceText);
    const destination = await endpoint(to, destinationText);
    const progress = !options.quiet && io.stderr.isTTY === true;
    let lastDraw = 0;
    const stats = await copy(source, destination, {
      recursive: options.recursive,
      onProgress: progress
        ? (file, done, total) => {
            const now = Date.now();
            if (now - lastDraw < 100 && done < total) return;
            lastDraw = now;
            const percent = total > 0 ? Math.floor((done / total) * 100) : 100;
            const rate = done / Math.max((now - started) / 1000, 0.001);
            io.stderr.write(
              `\r\u001b[2K${printable(basenameOf(file))}  ${percent}%  ${formatBytes(done)}  ${formatBytes(rate)}/s`,
            );
          }
        : undefined,
    });
    if (progress) io.stderr.write('\r\u001b[2K');
    if (!options.quiet) {
      const seconds = Math.max((Date.now() - started) / 1000, 0.001);
      io.stderr.write(
        `copied ${stats.files} file(s)${stats.directories ? ` in ${stats.directories} dir(s)` : ''}, ${formatBytes(stats.bytes)} in ${seconds.toFixed(2)} s (${formatBytes(stats.bytes / seconds)}/s), sha256 verified\n`,
      );
    }
    return 0;
  } catch (err) {
    return report(io, err);
  } finally {
    for (const env of opened.values()) await env.close();
  }
}

function basenameOf(path: string): string {
  return path.slice(path.lastIndexOf('/') + 1) || path;
}

async function withEnvironment(
  io: CliIo,
  flags: ConnectFlags,
  environmentId: string | undefined,
  action: (env: Environment) => Promise<number>,
): Promise<number> {
  let env: Environment | null = null;
  try {
    env = await openEnvironment(flags, io.env, environmentId);
    return await action(env);
  } catch (err) {
    return report(io, err);
  } finally {
    await env?.close();
  }
}

async function withLocation(
  io: CliIo,
  flags: ConnectFlags,
  text: string,
  action: (fs: Endpoint['fs'], path: string) => Promise<number>,
): Promise<number> {
  let location: Location;
  try {
    location = parseLocation(text);
  } catch (err) {
    return report(io, err);
  }
  if (location.kind === 'local') {
    try {
      return await action(new LocalFs(), location.path);
    } catch (err) {
      return report(io, err);
    }
  }
  const { path } = location;
  return withEnvironment(io, flags, location.environmentId, (env) => action(env.fs, path));
}

/**
 * Prints a failure. Its message may quote the executor (an RPC error's text, a path it named), which must not
 * reach the terminal as control sequences: they are shown as `?` (line breaks kept).
 */
function report(io: CliIo, err: unknown): number {
  const message = err instanceof Error ? err.message : String(err);
  io.stderr.write(`harness: ${message.replace(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/g, '?')}\n`);
  return err instanceof TetherError && err.code === 'invalid_argument' ? 2 : 1;
}

/** Parses and runs; resolves with the process exit code. */
export async function run(argv: string[], io: CliIo): Promise<number> {
  let code = 0;
  const program = buildProgram(io, (value) => {
    code = value;
  });
  try {
    await program.parseAsync(argv, { from: 'user' });
  } catch (err) {
    if (err instanceof CommanderError) return err.exitCode === 0 ? 0 : 2;
    throw err;
  }
  return code;
}
