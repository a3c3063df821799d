/**
 * The connection master (like ssh's ControlMaster): one background process per user, registry, environment
 * and API key that keeps a few channels to the environment already set up (bundle fetched, relay socket
 * open, hybrid Noise handshake done) and hands one to each harness invocation that asks on its unix socket,
 * splicing the channel's plaintext JSON-RPC messages between the two unchanged. Each relay stream carries
 * exactly one session (rendezvous.md §3), so channels are never shared: a handed-out channel is the
 * invocation's alone, and the pool is refilled in the background.
 */

import { chmodSync, unlinkSync } from 'node:fs';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import {
  type OpenedChannel,
  publicKeyToJson,
  type RendezvousDialer,
  SocketMessageTransport,
  TetherError,
} from '@tether/client';

type MessageTransport = OpenedChannel['transport'];

import { DISCARDING_SINK, idleSink, type Switchable, startSwitchable } from './channels.js';
import { type ControlReply, encodeFrame, type MasterStatus, parseRequest, readControlFrame } from './protocol.js';
import { WarmKeeper, type WarmKeeperOptions } from './warm-keeper.js';

export interface MasterOptions {
  dialer: RendezvousDialer;
  environmentId: string;
  /** Shown in `status` as its origin only. */
  registryUrl: string;
  socketPath: string;
  /** Channels kept ready (1…MAX_POOL). */
  poolSize: number;
  /** Exit after this long with no invocation connected (0: never). */
  persistMs: number;
  /** A ready channel older than this is replaced (well inside the relay's 30-minute idle timeout). */
  maxChannelAgeMs?: number;
  /** One line per event; never given a secret. */
  log: (line: string) => void;
  /** Keep a warm process waiting here for commands (src/warm.ts); none when absent. */
  warm?: Omit<WarmKeeperOptions, 'log'>;
}

export const MAX_POOL = 8;
/** Invocations served at once; one more is answered `busy` (it then connects directly). */
export const MAX_CLIENTS = 64;
/** Channels being set up at once (refills plus invocations that found the pool empty). */
const MAX_DIALS = 8;
const DEFAULT_CHANNEL_AGE_MS = 5 * 60_000;
/** How long an invocation has to send its request. */
const REQUEST_TIMEOUT_MS = 5_000;
const RETRY_FIRST_MS = 200;
const RETRY_MAX_MS = 10_000;
/** Failures after which dialing again cannot help: the master gives up and exits. */
const FINAL_CODES: ReadonlySet<string> = new Set(['unauthorized', 'revoked', 'executor_key_changed', 'not_found']);

/** A set-up channel and whoever is reading it now (the pool, then the invocation it was handed to). */
interface Channel extends Switchable {
  transport: MessageTransport;
  openedAt: number;
  ageTimer: NodeJS.Timeout | null;
}

type State = 'running' | 'closing' | 'closed';

export class Master {
  private state: State = 'running';
  private readonly pool: Channel[] = [];
  private readonly inUse = new Set<Channel>();
  private readonly clients = new Set<Socket>();
  private dialing = 0;
  private retryDelay = RETRY_FIRST_MS;
  private retryTimer: NodeJS.Timeout | null = null;
  private idleTimer: NodeJS.Timeout | null = null;
  private readonly abort = new AbortController();
  private readonly startedAt = new Date();
  private readonly server: Server;
  private warm: WarmKeeper | null = null;
  private resolveClosed!: () => void;
  /** Resolves once the master has stopped (stop request, idle timeout, a final failure or `close`). */
  readonly closed: Promise<void> = new Promise((resolve) => {
    this.resolveClosed = resolve;
  });

  private constructor(private readonly options: MasterOptions) {
    this.server = createServer((socket) => this.onClient(socket));
  }

  /**
   * Sets up the first channel (so a bad key or an unreachable environment fails here, for `master start` to
   * report), then listens on the socket. A live master already on the socket is an error (`already
   * running`); a stale socket (its master died) is removed.
   */
  static async start(options: MasterOptions): Promise<Master> {
    if (!(options.poolSize >= 1 && options.poolSize <= MAX_POOL)) {
      throw new TetherError('invalid_argument', `pool size must be 1 to ${MAX_POOL}`);
    }
    const master = new Master(options);
    try {
      master.addToPool(await options.dialer.dial(master.abort.signal));
      await master.listen();
    } catch (err) {
      await master.close('start failed');
      throw err;
    }
    master.options.log(`listening on ${options.socketPath}, environment ${options.environmentId}`);
    master.fill();
    master.armIdle();
    if (options.warm) {
      master.warm = new WarmKeeper({ ...options.warm, log: options.log });
      master.warm.start();
    }
    return master;
  }

  status(): MasterStatus {
    let registry = '';
    try {
      registry = new URL(this.options.registryUrl).origin;
    } catch {
      // shown empty
    }
    return {
      pid: process.pid,
      environmentId: this.options.environmentId,
      registry,
      ready: this.pool.length,
      inUse: this.inUse.size,
      persistSeconds: Math.round(this.options.persistMs / 1000),
      startedAt: this.startedAt.toISOString(),
      warmPid: this.warm?.pid ?? null,
      warmChannel: this.warm?.channelReady ?? false,
    };
  }

  /** Stops listening, removes the socket, closes every channel (invocations using one reconnect directly). */
  async close(reason = 'closed'): Promise<void> {
    if (this.state !== 'running') return this.closed;
    this.state = 'closing';
    this.options.log(`stopping: ${reason}`);
    this.abort.abort(new TetherError('closed', reason));
    for (const timer of [this.retryTimer, this.idleTimer]) if (timer) clearTimeout(timer);
    this.warm?.close();
    for (const channel of [...this.pool, ...this.inUse]) this.dropChannel(channel, reason);
    for (const socket of this.clients) socket.destroy();
    if (this.server.listening) {
      // Only our own socket: a master that lost the race to another never listened and removes nothing.
      try {
        unlinkSync(this.options.socketPath);
      } catch {
        // already gone
      }
      await new Promise<void>((resolve) => this.server.close(() => resolve()));
    }
    this.state = 'closed';
    this.resolveClosed();
  }

  private async listen(): Promise<void> {
    const path = this.options.socketPath;
    for (let attempt = 0; ; attempt++) {
      try {
        await new Promise<void>((resolve, reject) => {
          this.server.once('error', reject);
          this.server.listen(path, () => {
            this.server.off('error', reject);
            resolve();
          });
        });
        // The directory is 0700 already; the socket itself is the user's only too.
        chmodSync(path, 0o600);
        return;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EADDRINUSE' || attempt > 0) throw err;
        if (await socketAnswers(path)) throw new TetherError('invalid_argument', `a master already runs on ${path}`);
        unlinkSync(path);
      }
    }
  }

  // Pool ----------------------------------------------------------------------------------------------

  private addToPool(transport: MessageTransport): void {
    const channel: Channel = {
      transport,
      openedAt: Date.now(),
      ageTimer: null,
      sink: idleSink((reason) => this.dropChannel(channel, reason)),
    };
    startSwitchable(transport, channel);
    if (this.state !== 'running') {
      transport.close(1000, 'master closing');
      return;
    }
    channel.ageTimer = setTimeout(() => {
      this.dropChannel(channel, 'replaced (age)');
      this.fill();
    }, this.options.maxChannelAgeMs ?? DEFAULT_CHANNEL_AGE_MS);
    this.pool.push(channel);
  }

  private dropChannel(channel: Channel, reason: string): void {
    if (channel.ageTimer) clearTimeout(channel.ageTimer);
    channel.ageTimer = null;
    const index = this.pool.indexOf(channel);
    if (index >= 0) this.pool.splice(index, 1);
    const handedOut = this.inUse.delete(channel);
    channel.sink = DISCARDING_SINK;
    channel.transport.close(1000, reason);
    if ((index >= 0 || handedOut) && this.state === 'running') this.fill();
  }

  /** Dials until the pool is full again (in the background, with backoff after failures). */
  private fill(): void {
    while (
      this.state === 'running' &&
      this.retryTimer === null &&
      this.pool.length + this.dialing < this.options.poolSize &&
      this.dialing < MAX_DIALS
    ) {
      this.dialing++;
      this.options.dialer.dial(this.abort.signal).then(
        (transport) => {
          this.dialing--;
          this.retryDelay = RETRY_FIRST_MS;
          this.addToPool(transport);
        },
        (err: unknown) => {
          this.dialing--;
          this.dialFailed(err);
        },
      );
    }
  }

  private dialFailed(err: unknown): void {
    if (this.state !== 'running') return;
    const message = err instanceof Error ? err.message : String(err);
    if (err instanceof TetherError && FINAL_CODES.has(err.code)) {
      void this.close(`cannot set up channels: ${message}`);
      return;
    }
    this.options.log(`channel set-up failed (retrying in ${this.retryDelay} ms): ${message}`);
    if (this.retryTimer) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.fill();
    }, this.retryDelay);
    this.retryDelay = Math.min(this.retryDelay * 2, RETRY_MAX_MS);
  }

  /** A ready channel: from the pool, else one set up now. */
  private async takeChannel(): Promise<Channel> {
    const channel = this.pool.shift();
    if (channel) {
      if (channel.ageTimer) clearTimeout(channel.ageTimer);
      channel.ageTimer = null;
      // While another channel is ready, the one taken is replaced once its command is done: a set-up (registry,
      // relay, both sides' handshake) beside the command took the CPU of the master, the executor and the
      // relay from it (`harness exec -- true` back to back through a master: 0.93x the time, farm-bench 50
      // pairs, two cores). An empty pool is refilled at once.
      if (this.pool.length === 0) this.fill();
      return channel;
    }
    if (this.dialing >= MAX_DIALS) throw new Error('busy: too many channels being set up');
    this.dialing++;
    let transport: MessageTransport;
    try {
      transport = await this.options.dialer.dial(this.abort.signal);
    } finally {
      this.dialing--;
    }
    this.addToPool(transport);
    const fresh = this.pool.pop()!;
    if (fresh.ageTimer) clearTimeout(fresh.ageTimer);
    fresh.ageTimer = null;
    return fresh;
  }

  // Invocations ---------------------------------------------------------------------------------------

  private onClient(socket: Socket): void {
    socket.on('error', () => undefined);
    if (this.state !== 'running' || this.clients.size >= MAX_CLIENTS) {
      socket.end(encodeFrame({ ok: false, error: 'busy' } satisfies ControlReply));
      return;
    }
    this.clients.add(socket);
    this.disarmIdle();
    socket.once('close', () => {
      this.clients.delete(socket);
      this.armIdle();
    });
    void this.serve(socket);
  }

  private async serve(socket: Socket): Promise<void> {
    let request: ReturnType<typeof parseRequest>;
    let rest: Buffer;
    try {
      const frame = await readControlFrame(socket, REQUEST_TIMEOUT_MS);
      request = parseRequest(frame.value);
      rest = frame.rest;
    } catch {
      socket.destroy();
      return;
    }
    if (!request) {
      socket.end(encodeFrame({ ok: false, error: 'not a tether-master/1 request' } satisfies ControlReply));
      return;
    }
    if (request.op === 'status') {
      socket.end(encodeFrame({ ok: true, op: 'status', status: this.status() } satisfies ControlReply));
      return;
    }
    if (request.op === 'stop') {
      socket.end(encodeFrame({ ok: true, op: 'stop' } satisfies ControlReply));
      void this.close('stop requested');
      return;
    }
    let channel: Channel;
    try {
      channel = await this.takeChannel();
    } catch (err) {
      socket.end(encodeFrame({ ok: false, error: (err as Error).message } satisfies ControlReply));
      return;
    }
    const key = this.options.dialer.pin.key;
    if (socket.destroyed || this.state !== 'running' || key === null) {
      this.dropChannel(channel, 'invocation gone');
      socket.destroy();
      return;
    }
    socket.write(
      encodeFrame({ ok: true, op: 'channel', executorPublicKey: publicKeyToJson(key) } satisfies ControlReply),
    );
    this.splice(channel, new SocketMessageTransport(socket, { label: 'master client', initial: rest }));
    this.options.log(`channel handed out (${this.pool.length} ready, ${this.inUse.size} in use)`);
  }

  /** Joins a channel and an invocation's socket until either ends; backpressure runs both ways. */
  private splice(channel: Channel, client: SocketMessageTransport): void {
    this.inUse.add(channel);
    const upstream = channel.transport;
    let ended = false;
    const end = (reason: string) => {
      if (ended) return;
      ended = true;
      client.close(1000, reason);
      this.dropChannel(channel, reason);
    };
    channel.sink = {
      onMessage: (data, release) => {
        // A large message may sit in a pooled buffer of the secure stream: back once the socket wrote it.
        if (!client.send(data, release)) upstream.pause();
      },
      onClose: (reason) => end(`channel closed: ${reason}`),
      onDrain: () => client.resume(),
    };
    client.start({
      onMessage: (data) => {
        if (!upstream.send(data)) client.pause();
      },
      onClose: (reason) => end(`invocation closed: ${reason}`),
      onDrain: () => upstream.resume(),
    });
  }

  private armIdle(): void {
    if (this.state !== 'running' || this.clients.size > 0 || this.options.persistMs <= 0 || this.idleTimer) return;
    this.idleTimer = setTimeout(() => {
      this.idleTimer = null;
      void this.close(`idle for ${Math.round(this.options.persistMs / 1000)} s`);
    }, this.options.persistMs);
  }

  private disarmIdle(): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = null;
  }
}

/** Whether something accepts connections on the unix socket `path` (a live master) or not (stale). */
export function socketAnswers(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection(path);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}
