import { BufferPool, DEFAULT_HIGH_WATER_MARK, DEFAULT_LOW_WATER_MARK, releasingCallback } from '@tether/bytes';
import { burstWrites, installFastMessages, joinParts } from '@tether/user-read/websocket';
import type { WebSocket } from 'ws';
import { hasAttachmentMarker } from '../attachment.js';
import type { MessageTransport, TransportHandlers } from '../transport.js';

export interface WebSocketTransportOptions {
  /** Sent as `exec-server websocket <peer>` in errors. */
  peer?: string;
  /** Ping interval; a peer that has not answered the previous ping by the next tick is terminated. 0 disables. */
  pingIntervalMs?: number;
  highWaterMark?: number;
  lowWaterMark?: number;
  /**
   * Read messages with `installFastMessages` (no buffer per socket read or per message) instead of `ws`'s
   * events: for a socket that has not delivered anything yet. `maxPayload` is the socket's own limit.
   */
  fastReceive?: { server: boolean; maxPayload: number };
  /**
   * Slabs inbound messages are assembled in (`fastReceive`), from the transport's creator (an executor's
   * server hands every connection's transport its own); the creator closes it. Default: the transport's
   * own, closed with it.
   */
  pool?: BufferPool;
  /** What the socket reads into (`fastReceive`; see FastMessageOptions.readBuffer). Default: its own. */
  readBuffer?: Buffer;
}

/** The pool of a transport whose creator gave none: a connection's worth of large inbound messages. */
const INBOUND_POOL_OPTIONS = { step: 64 * 1024, maxPooledBytes: 8 * 1024 * 1024 } as const;

const TEXT_FRAME = { binary: false } as const;
const BINARY_FRAME = { binary: true } as const;

/**
 * One JSON-RPC message per WebSocket message (spec §1.2): text frames out (binary for a message with an
 * attachment, `attachment.ts`), text or binary in. The
 * message size limit is the server's `maxPayload` (ws closes with 1009 before buffering). Outbound
 * backpressure uses `bufferedAmount` against a high-water mark; `onDrain` fires below the low one.
 */
export class WebSocketTransport implements MessageTransport {
  readonly kind = 'websocket' as const;
  readonly carriesAttachments = true;
  readonly label: string;
  private readonly ws: WebSocket;
  private readonly pingIntervalMs: number;
  private readonly highWaterMark: number;
  private readonly lowWaterMark: number;
  private readonly fastReceive: WebSocketTransportOptions['fastReceive'];
  private readonly inbound: BufferPool;
  /** The pool is the transport's own (no `pool` option): it closes it when it closes. */
  private readonly ownsPool: boolean;
  private readonly readBuffer: Buffer | undefined;
  /** Messages sent in one burst (output notifications of one turn, several answers) leave in one write. */
  private readonly burst: () => void;
  private handlers: TransportHandlers | null = null;
  private pingTimer: NodeJS.Timeout | null = null;
  private awaitingPong = false;
  private needsDrain = false;
  private closed = false;

  constructor(ws: WebSocket, options: WebSocketTransportOptions = {}) {
    this.ws = ws;
    this.label = `exec-server websocket ${options.peer ?? 'peer'}`;
    this.pingIntervalMs = options.pingIntervalMs ?? 30_000;
    this.highWaterMark = options.highWaterMark ?? DEFAULT_HIGH_WATER_MARK;
    this.lowWaterMark = options.lowWaterMark ?? DEFAULT_LOW_WATER_MARK;
    this.fastReceive = options.fastReceive;
    this.ownsPool = options.pool === undefined;
    this.inbound = options.pool ?? new BufferPool(INBOUND_POOL_OPTIONS);
    this.readBuffer = options.readBuffer;
    this.burst = burstWrites(ws);
  }

  /** The pool inbound messages are assembled in (the creator's, or the transport's own). */
  get inboundPool(): BufferPool {
    return this.inbound;
  }

  get bufferedAmount(): number {
    return this.ws.bufferedAmount;
  }

  start(handlers: TransportHandlers): void {
    this.handlers = handlers;
    this.ws.on('message', (data: Buffer) => handlers.onMessage(data));
    if (this.fastReceive) {
      const inbound = this.inbound;
      installFastMessages(this.ws, {
        ...this.fastReceive,
        ...(this.readBuffer ? { readBuffer: this.readBuffer } : {}),
        text: true,
        lease: (size) => inbound.lease(size),
        onMessage: (parts, length, slab, isBinary) => {
          // Text is parsed into copies by now: its slab goes back. A binary message's attachment is a view
          // its handler may hold across awaits: that slab goes with the message, whose last holder releases
          // it (the executor once a block is written, harness cp once it wrote a block out).
          handlers.onMessage(joinParts(parts, length), isBinary && slab ? slab.release : undefined);
          return isBinary;
        },
      });
    }
    this.ws.on('pong', () => {
      this.awaitingPong = false;
    });
    this.ws.once('close', (code: number, reason: Buffer) =>
      this.finish(`websocket closed (${code}${reason.length ? `: ${reason.toString()}` : ''})`),
    );
    this.ws.on('error', (err: Error) => this.finish(`websocket error: ${err.message}`));
    if (this.pingIntervalMs > 0) {
      this.pingTimer = setInterval(() => this.heartbeat(), this.pingIntervalMs);
      this.pingTimer.unref();
    }
  }

  send(message: string | Buffer, release?: () => void): boolean {
    if (this.closed) {
      release?.();
      return false;
    }
    // Bytes go out as a text frame too: the peer sees the same JSON text either way; only a message with a
    // binary attachment (never valid UTF-8 JSON) needs a binary frame. ws frames a server's message
    // without copying it and calls back once the socket has written it (or failed to).
    const frame = hasAttachmentMarker(message) ? BINARY_FRAME : TEXT_FRAME;
    this.burst();
    this.ws.send(message, frame, releasingCallback(release, this.afterWrite));
    if (this.ws.bufferedAmount > this.highWaterMark) this.needsDrain = true;
    return !this.needsDrain;
  }

  pause(): void {
    this.ws.pause();
  }

  resume(): void {
    if (!this.closed) this.ws.resume();
  }

  close(code = 1000, reason = ''): void {
    if (this.ws.readyState === this.ws.OPEN || this.ws.readyState === this.ws.CONNECTING) {
      this.ws.close(code, reason);
    }
    this.finish('closed');
  }

  private readonly afterWrite = (err?: Error): void => {
    if (err) return; // the close/error event reports it
    if (this.needsDrain && this.ws.bufferedAmount <= this.lowWaterMark) {
      this.needsDrain = false;
      this.handlers?.onDrain();
    }
  };

  private heartbeat(): void {
    if (this.awaitingPong) {
      this.ws.terminate();
      return;
    }
    this.awaitingPong = true;
    this.ws.ping();
  }

  private finish(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    if (this.pingTimer) clearInterval(this.pingTimer);
    this.pingTimer = null;
    // Slabs still held by messages (an attachment being written) are dropped when released.
    if (this.ownsPool) this.inbound.close();
    this.handlers?.onClose(reason);
  }
}
