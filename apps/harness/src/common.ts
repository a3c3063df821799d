import type { Readable, Writable } from 'node:stream';
import { type Environment, isConnectionError, LocalFs, type ProcessEvent, TetherError } from '@tether/client';
import { loadNativePipe } from '@tether/native-pipe';
import { durationArg } from '@tether/telemetry/cli';
import { type Command, InvalidArgumentError, Option } from 'commander';
import type { Endpoint } from './copy.js';
import { namingFs } from './fs-errors.js';
import { connectRendezvous, type RendezvousConnector } from './reuse/client.js';
import type { ReadyChannel } from './reuse/ready-channel.js';
import { type ConnectFlags, type Location, openEnvironment, parseLocation } from './target.js';

export interface CliIo {
  stdin: Readable & { isTTY?: boolean; setRawMode?: (raw: boolean) => unknown };
  stdout: Writable & { isTTY?: boolean; columns?: number; rows?: number };
  stderr: Writable & { isTTY?: boolean };
  env: NodeJS.ProcessEnv;
  /** A warm process's channel set up ahead for this command (src/reuse/ready-channel.ts). */
  readyChannel?: ReadyChannel;
}

/** How a command reaches a registry environment: a warm process's ready channel first, when it has one. */
export function connectorOf(io: CliIo): RendezvousConnector {
  const ready = io.readyChannel;
  return ready ? (options, env) => connectRendezvous(options, env, ready) : connectRendezvous;
}

/**
 * The harness's own exit codes, beside the remote command's (which pass through unchanged): shell's 126
 * and 127 for a command that could not be run, ssh's 255 for a connection that failed, 2 for bad usage.
 */
export const EXIT = {
  failure: 1,
  usage: 2,
  cannotRun: 126,
  notFound: 127,
  /** 128 + SIGPIPE: the reader of our output went away (`| head`), as a shell reports a tool that SIGPIPE ended. */
  outputClosed: 141,
  connection: 255,
} as const;

/**
 * Our stdout or stderr has no reader any more (EPIPE: `harness … | head` after head exited). The command
 * stops at once (a remote process it started is stopped) and exits 141 without a word, as a Unix tool that
 * SIGPIPE ended.
 */
export class OutputClosedError extends Error {
  override readonly name = 'OutputClosedError';
  constructor() {
    super('the output was closed');
  }
}

/** How one of our output streams is doing: the first write error, and a promise that rejects with it. */
interface OutputState {
  failure: Error | null;
  failed: Promise<never>;
  /** Bytes written so far, until the pipe is sized (then no longer counted). */
  written: number;
  /** Whether its pipe was raised to OUTPUT_PIPE_BYTES (or found not to be one) once output became bulk. */
  pipeSized: boolean;
}

const outputs = new WeakMap<object, OutputState>();

/**
 * Watches a stream we write to: its first error is kept (EPIPE as OutputClosedError, any other as a failure
 * naming the stream), so that no write error is ever an unhandled 'error' event.
 */
function outputState(stream: CliIo['stdout'] | CliIo['stderr'], name: string): OutputState {
  const state = outputs.get(stream);
  if (state) return state;
  let reject!: (err: Error) => void;
  const failed = new Promise<never>((_resolve, fail) => {
    reject = fail;
  });
  failed.catch(() => undefined);
  const created: OutputState = { failure: null, failed, written: 0, pipeSized: false };
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (created.failure) return;
    created.failure =
      err.code === 'EPIPE' || err.code === 'ERR_STREAM_DESTROYED'
        ? new OutputClosedError()
        : new TetherError('invalid_state', `cannot write to ${name}: ${err.code ?? err.message}`);
    reject(created.failure);
  });
  outputs.set(stream, created);
  return created;
}

/** Starts watching stdout and stderr (before anything is written; `run` does it). */
export function watchOutput(io: CliIo): void {
  outputState(io.stdout, 'stdout');
  outputState(io.stderr, 'stderr');
}

/** The first write error of stdout or stderr, or null. */
export function outputFailure(io: CliIo): Error | null {
  return outputState(io.stdout, 'stdout').failure ?? outputState(io.stderr, 'stderr').failure;
}

/** Rejects with the first write error of stdout or stderr (never resolves). */
export function outputFailed(io: CliIo): Promise<never> {
  return Promise.race([outputState(io.stdout, 'stdout').failed, outputState(io.stderr, 'stderr').failed]);
}

/**
 * What may wait in our stdout's buffer for a slow reader before the command waits for it (per write, Node's
 * streams ask for a 'drain' past 16-64 KiB: one output chunk). A reader slower than the output (`| sha256sum`)
 * then takes each chunk from a full buffer instead of the command going round the event loop per chunk.
 */
const OUTPUT_BUFFER_BYTES = 1024 * 1024;

/**
 * The capacity our output's pipe is raised to when bulk output first comes (Linux's default is 64 KiB). A
 * reader slower than the stream (`| sha256sum`) empties 64 KiB in about 0.2 ms, so it stalls whenever this
 * process is not scheduled at once to refill it; with 1 MiB it finds about 3 ms of work waiting (bench:path's
 * `cat | sha256sum` row: 1.36-1.58 s → 1.32-1.39 s on two cores, four alternating pairs). A user over the
 * system's pipe limits keeps 64 KiB, which still works.
 */
const OUTPUT_PIPE_BYTES = 1024 * 1024;
/**
 * Output this large is bulk, in however many chunks it comes (a busy executor may send small ones): small
 * output (a prompt, a listing) never loads the addon for it.
 */
const BULK_OUTPUT_BYTES = 32 * 1024;

function sizePipe(state: OutputState, sink: CliIo['stdout'] | CliIo['stderr']): void {
  state.pipeSized = true;
  const fd = (sink as { fd?: unknown }).fd;
  if (typeof fd !== 'number') return;
  try {
    loadNativePipe()?.growPipe(fd, OUTPUT_PIPE_BYTES);
  } catch {
    // Closed meanwhile: the write says so.
  }
}

/**
 * Writes to stdout or stderr with backpressure: waits for 'drain' when the stream asks for it. Throws
 * OutputClosedError once the reader has gone away (so a command stops at the write after it, as a tool that
 * SIGPIPE ends), or the stream's other write failure.
 */
export async function writeOutput(
  io: CliIo,
  sink: CliIo['stdout'] | CliIo['stderr'],
  chunk: Buffer | string,
  release?: () => void,
) {
  const failure = outputFailure(io);
  if (failure) throw failure;
  const state = outputs.get(sink);
  if (state !== undefined && !state.pipeSized) {
    state.written += chunk.length;
    if (state.written >= BULK_OUTPUT_BYTES) sizePipe(state, sink);
  }
  // A chunk in pooled memory goes back once our stdout has written it (its callback), which only a stream
  // on a file descriptor guarantees: a PassThrough, say, still holds the chunk after the callback.
  const written = release !== undefined && typeof (sink as { fd?: unknown }).fd === 'number' ? release : undefined;
  if (written ? sink.write(chunk, () => written()) : sink.write(chunk)) return;
  if (sink.writableLength <= OUTPUT_BUFFER_BYTES) return;
  await Promise.race([new Promise((resolve) => sink.once('drain', resolve)), outputFailed(io)]);
}

/**
 * Waits until what was written has been handed on or has failed (a pipe's EPIPE is reported a tick after the
 * write), then throws the failure if there was one.
 */
export async function flushOutput(io: CliIo): Promise<void> {
  await new Promise((resolve) => setImmediate(resolve));
  const failure = outputFailure(io);
  if (failure) throw failure;
}

/**
 * Writes a process's output to our stdout and stderr as it comes; its exit code once it has ended and all of
 * it was handed on. Throws OutputClosedError when our output has no reader.
 */
export async function printOutput(
  io: CliIo,
  events: AsyncIterable<ProcessEvent> & { readonly completion: Promise<{ exitCode: number }> },
): Promise<number> {
  for await (const event of events) {
    if (event.kind !== 'output') continue;
    await writeOutput(io, event.stream === 'stderr' ? io.stderr : io.stdout, event.chunk, event.release);
  }
  const { exitCode } = await events.completion;
  await flushOutput(io);
  return exitCode;
}

/** How a command hands its exit code back to `run`. */
export type SetExit = (code: number) => void;

export function keyValue(value: string, previous: Record<string, string> = {}): Record<string, string> {
  const eq = value.indexOf('=');
  if (eq <= 0) throw new InvalidArgumentError(`expected NAME=VALUE, got ${JSON.stringify(value)}`);
  return { ...previous, [value.slice(0, eq)]: value.slice(eq + 1) };
}

/** The options that name a registry, an environment and a harness API key (`harness login` takes only these). */
export function registryOptions(): Option[] {
  return [
    new Option(
      '--context <name>',
      'use this context of the config file instead of its current one (see harness config)',
    ),
    new Option('--registry <url>', 'registry base URL'),
    new Option('--environment-id <id>', 'environment to use'),
    new Option(
      '--allow-insecure-registry',
      'allow a plain http:// registry that is not loopback: the API key and bundle cross the network in clear',
    ),
    new Option(
      '--api-key-file <file>',
      'read the harness API key from this file, which only you may read (chmod 600); the key itself may be in TETHER_HARNESS_API_KEY instead',
    ),
  ];
}

export function connectOptions(command: Command): Command {
  const [context, registry, environmentId, allowInsecure, apiKeyFile] = registryOptions() as [
    Option,
    Option,
    Option,
    Option,
    Option,
  ];
  return command
    .addOption(context)
    .addOption(registry)
    .addOption(environmentId)
    .addOption(new Option('--url <ws-url>', "talk to an executor's WebSocket directly instead"))
    .addOption(
      new Option(
        '--connect-timeout <duration>',
        'give up connecting after this long (500ms, 30s, 5m; a bare number is seconds; at most 1h); failures that may pass are retried until then (default 20s)',
      ).argParser(parseSeconds),
    )
    .addOption(allowInsecure)
    .addOption(apiKeyFile)
    .addOption(
      new Option(
        '--executor-key <file>',
        'trust only this executor public key (NoiseChannelPublicKey JSON) for the environment',
      ),
    );
}

/** Control characters (a remote side's names may hold terminal escapes) shown as `?` on a terminal. */
export function printable(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, '?');
}

const connectTimeout = durationArg({ bare: 's', max: 3600_000 });

/** `--connect-timeout`: a duration (a bare number is seconds) above 0 and at most 1h, in seconds. */
export function parseSeconds(value: string): number {
  return connectTimeout(value) / 1000;
}

export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${Math.round(bytes)} B`; // a rate (bytes / seconds) is rarely whole
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(1)} ${units[unit]}`;
}

export async function withEnvironment(
  io: CliIo,
  flags: ConnectFlags,
  environmentId: string | undefined,
  action: (env: Environment) => Promise<number>,
): Promise<number> {
  let env: Environment | null = null;
  try {
    env = await openEnvironment(flags, io.env, environmentId, connectorOf(io));
    return await action(env);
  } catch (err) {
    return report(io, err);
  } finally {
    await env?.close();
  }
}

export async function withLocation(
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
  // Failures name the path as written: `ENV:/path: No such file or directory` (fs-errors.ts).
  if (location.kind === 'local') {
    try {
      return await action(namingFs(new LocalFs(), ''), location.path);
    } catch (err) {
      return report(io, err);
    }
  }
  const { path, environmentId } = location;
  return withEnvironment(io, flags, environmentId, (env) => action(namingFs(env.fs, `${environmentId}:`), path));
}

/**
 * Prints a failure. Its message may quote the executor (an RPC error's text, a path it named), which must not
 * reach the terminal as control sequences: they are shown as `?` (line breaks kept).
 */
export function report(io: CliIo, err: unknown): number {
  if (err instanceof OutputClosedError) return EXIT.outputClosed;
  const message = err instanceof Error ? err.message : String(err);
  io.stderr.write(`harness: ${message.replace(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/g, '?')}\n`);
  return exitCodeFor(err);
}

/** 141 when our output was closed, 2 for bad usage, 255 when the connection failed (ssh's convention: refused key, unreachable registry, relay or executor, a failed handshake, a session lost), else 1. */
export function exitCodeFor(err: unknown): number {
  if (err instanceof OutputClosedError) return EXIT.outputClosed;
  if (err instanceof TetherError && err.code === 'invalid_argument') return EXIT.usage;
  return isConnectionError(err) ? EXIT.connection : EXIT.failure;
}
