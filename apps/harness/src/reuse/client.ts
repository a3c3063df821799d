/**
 * The invocation's side of connection reuse: `TETHER_REUSE` decides whether a command connects through its
 * user's connection master (`harness master start`, or started on first use with `auto`), and the master's
 * channels reach the SDK as a `ChannelSource`, so the session's key pin, reconnect and resume work as on a
 * direct connection. Whatever goes wrong with a master (none, stale socket, not this user's, busy, broken
 * mid-session) ends in a direct connection, never in trusting something else.
 */
import { spawn } from 'node:child_process';
import { closeSync, openSync, unlinkSync } from 'node:fs';
import { createConnection, type Socket } from 'node:net';
import { dirname } from 'node:path';
import {
  type ChannelSource,
  Environment,
  type ExecServerClientOptions,
  type NoisePublicKey,
  type OpenedChannel,
  parsePublicKeyJson,
  publicKeyToJson,
  type RendezvousOptions,
  SocketMessageTransport,
  TetherError,
} from '@tether/client';
import type { ChannelTarget } from './channels.js';
import { checkPrivateDir, checkSocket, ensurePrivateDir, type MasterPaths, masterPaths } from './paths.js';
import {
  type ControlReply,
  type ControlRequest,
  encodeFrame,
  PROTOCOL,
  parseReply,
  readControlFrame,
} from './protocol.js';
import type { ReadyChannel } from './ready-channel.js';
import { REUSE_ENV, type ReuseMode, reuseSetting } from './runtime-dir.js';

export { REUSE_ENV, type ReuseMode } from './runtime-dir.js';
/** Idle timeout of a master started without `--persist` (ssh's ControlPersist 10m). */
export const DEFAULT_PERSIST_SECONDS = 600;
export const DEFAULT_POOL = 2;
/** How long a channel request may wait for the master (it may have to set one up: bundle, relay, handshake). */
const CHANNEL_REPLY_TIMEOUT_MS = 15_000;
const CONTROL_REPLY_TIMEOUT_MS = 5_000;

/** Everything `openEnvironment` resolved for a rendezvous connection. */
export type RendezvousConnectOptions = RendezvousOptions & Omit<ExecServerClientOptions, 'dial'>;
/** How `openEnvironment` turns resolved options into an Environment (replaced by the master commands). */
export type RendezvousConnector = (options: RendezvousConnectOptions, env: NodeJS.ProcessEnv) => Promise<Environment>;

/** `TETHER_REUSE`: `no`, `use` (default: a running master if there is one), `auto` (start one if none). */
export function reuseMode(env: NodeJS.ProcessEnv): ReuseMode {
  const mode = reuseSetting(env);
  if (mode !== null) return mode;
  const value = env[REUSE_ENV]?.trim().toLowerCase();
  throw new TetherError('invalid_argument', `${REUSE_ENV} must be no, use or auto (got ${JSON.stringify(value)})`);
}

/**
 * The default connector: through the master where `TETHER_REUSE` allows it, else (or on any problem) directly.
 * A command a warm process runs has that process's `ready` channel first (src/reuse/ready-channel.ts), when it
 * was set up for this command's master; a reconnect then asks the master as any command does.
 */
export function connectRendezvous(
  options: RendezvousConnectOptions,
  env: NodeJS.ProcessEnv,
  ready?: ReadyChannel,
): Promise<Environment> {
  const mode = reuseMode(env);
  const paths = mode === 'no' ? null : masterPaths(options, env);
  // A warm process may run a command for another master's environment: its channel is of no use then.
  const own = ready?.spec.socket === paths?.socket ? ready : undefined;
  if (ready && !own) ready.close();
  if (paths === null) return Environment.connectRendezvous(options);
  const master = new MasterChannelSource(paths, mode === 'auto' ? () => startMaster(options, env, {}) : null);
  const source: ChannelSource = own
    ? {
        open: (signal) => {
          const channel = own.take();
          return channel ? Promise.resolve(channel) : master.open(signal);
        },
      }
    : master;
  return Environment.connectRendezvous({ ...options, channelSource: source });
}

/**
 * Channels from the master on `paths.socket`. When there is no usable master it answers null (the SDK then
 * dials directly), after starting one first if `start` is given (once per invocation).
 */
export class MasterChannelSource implements ChannelSource {
  private startTried = false;

  constructor(
    private readonly paths: MasterPaths,
    private readonly start: (() => Promise<unknown>) | null,
  ) {}

  async open(signal: AbortSignal): Promise<OpenedChannel | null> {
    let present: boolean;
    try {
      present = checkPrivateDir(this.paths.dir) && checkSocket(this.paths.socket);
    } catch {
      return null; // not this user's: never used, and left alone
    }
    if (!present && this.start && !this.startTried) {
      this.startTried = true;
      try {
        await this.start();
        present = checkSocket(this.paths.socket);
      } catch {
        return null;
      }
    }
    if (!present) return null;
    let socket: Socket;
    try {
      socket = await connectSocket(this.paths.socket, signal);
    } catch (err) {
      // Refused: the master died and left its socket. Removed, so the next invocation does not try it.
      if ((err as NodeJS.ErrnoException).code === 'ECONNREFUSED') removeStale(this.paths.socket);
      return null;
    }
    // The connect's deadline (--connect-timeout) bounds the master's answer too.
    const onAbort = () => socket.destroy();
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      const { reply, rest } = await request(socket, 'channel', CHANNEL_REPLY_TIMEOUT_MS);
      if (!reply.ok || reply.op !== 'channel') {
        socket.destroy();
        return null;
      }
      const executorPublicKey: NoisePublicKey = parsePublicKeyJson(JSON.stringify(reply.executorPublicKey));
      const transport = new SocketMessageTransport(socket, { label: 'connection master', initial: rest });
      return { transport, executorPublicKey };
    } catch {
      socket.destroy();
      return null;
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
  }
}

function removeStale(path: string): void {
  try {
    if (checkSocket(path)) unlinkSync(path);
  } catch {
    // gone already, or not ours to remove
  }
}

function connectSocket(path: string, signal: AbortSignal): Promise<Socket> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const socket = createConnection(path);
    const onAbort = () => socket.destroy(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    socket.once('connect', () => {
      signal.removeEventListener('abort', onAbort);
      socket.off('error', reject);
      socket.on('error', () => undefined);
      resolve(socket);
    });
    socket.once('error', (err) => {
      signal.removeEventListener('abort', onAbort);
      reject(err);
    });
  });
}

async function request(
  socket: Socket,
  op: ControlRequest['op'],
  timeoutMs: number,
): Promise<{ reply: ControlReply; rest: Buffer }> {
  socket.write(encodeFrame({ protocol: PROTOCOL, op } satisfies ControlRequest));
  const { value, rest } = await readControlFrame(socket, timeoutMs);
  return { reply: parseReply(value, op), rest };
}

/** One control request to the master at `path` (status, stop); null when no master answers there. */
export async function controlRequest(path: string, op: 'status' | 'stop'): Promise<ControlReply | null> {
  if (!checkPrivateDir(dirname(path)) || !checkSocket(path)) return null;
  let socket: Socket;
  try {
    socket = await connectSocket(path, new AbortController().signal);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ECONNREFUSED') {
      removeStale(path);
      return null;
    }
    throw err;
  }
  try {
    return (await request(socket, op, CONTROL_REPLY_TIMEOUT_MS)).reply;
  } finally {
    socket.destroy();
  }
}

// Starting a master ----------------------------------------------------------------------------------

/** What `master serve` gets from its starter (`TETHER_MASTER_SPEC`, JSON): the resolved target, key included. */
export const SPEC_ENV = 'TETHER_MASTER_SPEC';

export interface MasterSpec extends ChannelTarget {
  connectTimeoutMs: number | null;
  persistSeconds: number;
  pool: number;
  /** Keep a warm process for commands (src/warm.ts); absent from older starters: kept. */
  warm?: boolean;
}

export interface StartOptions {
  persistSeconds?: number;
  pool?: number;
  /** False: no warm process (default true). */
  warm?: boolean;
}

export type StartResult = { socket: string; pid: number; started: boolean };

/**
 * Starts a master for `options` in the background (its own session: it outlives this terminal) and waits
 * until it listens; a master already running there is reported as such. The API key travels to it in its
 * environment, never on its command line.
 */
export async function startMaster(
  options: RendezvousConnectOptions,
  env: NodeJS.ProcessEnv,
  start: StartOptions,
): Promise<StartResult> {
  const paths = masterPaths(options, env);
  ensurePrivateDir(paths.dir);
  const running = await controlRequest(paths.socket, 'status').catch(() => null);
  if (running?.ok && running.op === 'status') return { socket: paths.socket, pid: running.status.pid, started: false };
  const spec: MasterSpec = {
    registryUrl: options.registryUrl,
    environmentId: options.environmentId,
    apiKey: options.apiKey,
    allowInsecureRegistry: options.allowInsecureRegistry === true,
    executorPublicKey: options.executorPublicKey ? publicKeyToJson(options.executorPublicKey) : null,
    connectTimeoutMs: options.connectRetry ? (options.connectRetry.timeoutMs ?? null) : null,
    persistSeconds: start.persistSeconds ?? DEFAULT_PERSIST_SECONDS,
    pool: start.pool ?? DEFAULT_POOL,
    warm: start.warm !== false,
  };
  // Only what the master needs from here: no TETHER_* setting may redirect it. TETHER_NATIVE_* (which native
  // addons load) stay: its warm process must load what the commands it serves would (src/warm.ts).
  const childEnv: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(env)) {
    if (!name.startsWith('TETHER_') || name.startsWith('TETHER_NATIVE_')) childEnv[name] = value;
  }
  childEnv[SPEC_ENV] = JSON.stringify(spec);
  const entry = process.argv[1];
  if (!entry) throw new TetherError('invalid_argument', 'cannot tell which harness to start as the master');
  const log = openSync(paths.log, 'a', 0o600);
  let child: ReturnType<typeof spawn>;
  try {
    child = spawn(process.execPath, [entry, 'master', 'serve', '--ready-fd', '3'], {
      detached: true,
      cwd: '/',
      env: childEnv,
      stdio: ['ignore', log, log, 'pipe'],
    });
  } finally {
    closeSync(log);
  }
  const ready = await new Promise<string>((resolve, reject) => {
    const pipe = child.stdio[3] as NodeJS.ReadableStream & { destroy(): void };
    let text = '';
    pipe.setEncoding('utf8');
    pipe.on('data', (chunk: string) => {
      text += chunk;
      if (text.length > 4096) pipe.destroy();
    });
    pipe.on('error', () => undefined);
    pipe.once('close', () => resolve(text));
    child.once('error', reject);
  });
  let answer: { ready?: boolean; error?: string } = {};
  try {
    answer = JSON.parse(ready.trim() || '{}') as typeof answer;
  } catch {
    // reported below
  }
  if (answer.ready !== true) {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    const why = typeof answer.error === 'string' ? answer.error : `it exited; see ${paths.log}`;
    throw new TetherError('connect_failed', `the connection master did not start: ${why}`);
  }
  child.unref();
  return { socket: paths.socket, pid: child.pid ?? -1, started: true };
}
