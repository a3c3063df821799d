import type { Socket } from 'node:net';
import type { WebSocket } from 'ws';
import type { Clock } from './clock.js';
import type { FastPath } from './fastpath.js';

/** `WebSocket.OPEN`. */
export const OPEN = 1;
const CLOSED = 3;

/** One message: `parts` are views (in order) whose lengths add up to `length`. */
export type PeerMessageHandler = (parts: Buffer[], length: number, isBinary: boolean) => void;

/** What every peer of one relay shares: its clock, its data path and its message limit. */
export interface PeerContext {
  readonly clock: Clock;
  readonly fastPath: FastPath;
  readonly maxMessageBytes: number;
  /** Switch sockets to the fast data path (false with a tap: it sees ordinary reads). */
  readonly fast: boolean;
  /** A socket error (ws closes the socket itself: 1009 for oversize, 1002 for protocol errors). */
  onError(err: Error & { code?: string }): void;
}

/**
 * One accepted WebSocket, whichever its role, and what is the socket's own business: when it was last heard from
 * (ping/pong keepalive), whether it is being read (backpressure: a writer paused while this socket drains), and
 * how long it may take to finish a close. What the socket carries (streams, pairing) is the table's (pairing.ts).
 */
export class Peer {
  /** Epoch ms of the last message, ping or pong from the other end. */
  lastSeen: number;
  /** Not being read: paused by the socket it writes to, until that one drains. */
  #paused = false;
  /** Writers paused because this socket is above its high-water mark (made on the first: most sockets have none). */
  #throttled: Set<Peer> | null = null;
  #drainHooked = false;
  #graceTimer: NodeJS.Timeout | undefined;

  constructor(
    readonly ws: WebSocket,
    readonly socket: Socket,
    private readonly context: PeerContext,
  ) {
    this.lastSeen = context.clock();
  }

  /** Hands every message to `onMessage` (fast path or `ws`'s), keeps `lastSeen` on pings and pongs. */
  listen(onMessage: PeerMessageHandler, onClose: () => void): void {
    const { ws, context } = this;
    ws.on('message', (data: Buffer, isBinary: boolean) => onMessage([data], data.length, isBinary));
    context.fastPath.install(
      ws,
      context.maxMessageBytes,
      (parts, length) => onMessage(parts, length, true),
      context.fast,
    );
    const alive = () => {
      this.lastSeen = context.clock();
    };
    ws.on('pong', alive);
    ws.on('ping', alive);
    ws.on('error', context.onError);
    ws.once('close', onClose);
  }

  /** A message arrived: the socket is alive. Returns the time. */
  seen(): number {
    this.lastSeen = this.context.clock();
    return this.lastSeen;
  }

  get open(): boolean {
    return this.ws.readyState === OPEN;
  }

  /**
   * Keepalive, every ping interval: a socket silent for `pongTimeoutMs` at `at` is terminated (returns true), any
   * other open one pinged.
   */
  expired(at: number, pongTimeoutMs: number): boolean {
    if (!this.open) return false;
    if (at - this.lastSeen >= pongTimeoutMs) {
      this.ws.terminate();
      return true;
    }
    this.ws.ping();
    return false;
  }

  /** Closes (if open) and cuts the socket after `graceMs` if the other end does not finish the close handshake. */
  close(code: number, reason: string, graceMs: number): void {
    if (this.open) this.ws.close(code, reason);
    // A peer that does not read never completes the close handshake; free its buffers after a grace.
    this.#graceTimer = setTimeout(() => this.ws.terminate(), graceMs);
  }

  /** Resolves when the socket has closed. */
  closed(): Promise<void> {
    if (this.ws.readyState === CLOSED) return Promise.resolve();
    return new Promise((resolve) => this.ws.once('close', () => resolve()));
  }

  /** The socket is gone: no grace timer outlives it. */
  forget(): void {
    clearTimeout(this.#graceTimer);
  }

  // Backpressure: a writer is paused (not read) while this socket, its destination, is above its high-water mark.

  get paused(): boolean {
    return this.#paused;
  }

  /** Writers paused on this socket now. */
  get throttled(): number {
    return this.#throttled?.size ?? 0;
  }

  /** Stops reading `writer` until this socket drains (the write that crossed the mark will emit 'drain'). */
  throttle(writer: Peer): void {
    writer.#paused = true;
    writer.ws.pause();
    this.#throttled ??= new Set();
    const throttled = this.#throttled;
    throttled.add(writer);
    if (this.#drainHooked) return;
    this.#drainHooked = true;
    this.socket.once('drain', () => {
      this.#drainHooked = false;
      for (const paused of throttled) paused.#unpause();
      throttled.clear();
    });
  }

  /** Reads `writer` again now (a closing socket must be able to receive its peer's close frame). */
  release(writer: Peer): void {
    if (!writer.#paused) return;
    this.#throttled?.delete(writer);
    writer.#unpause();
  }

  /** This socket is done with its writers (they are closing or gone): none is resumed by its drain. */
  releaseAll(): void {
    this.#throttled?.clear();
  }

  /** Shutdown: every paused writer is read again, so that it can take its close frame. */
  resumeThrottled(): void {
    for (const paused of this.#throttled ?? []) paused.ws.resume();
  }

  #unpause(): void {
    this.#paused = false;
    this.ws.resume();
  }
}
