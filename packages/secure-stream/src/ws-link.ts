/** Relay frames on a `ws` socket (Node): reading them off any relay socket, and a harness's link of one stream. */
import { BufferPool, DEFAULT_HIGH_WATER_MARK, DEFAULT_LOW_WATER_MARK, releasingCallback } from '@tether/bytes';
import { decodeFrame, encodeFrame, type Frame, FrameError, MAX_FRAME_BYTES } from '@tether/relay-frames';
import { burstWrites, installFastMessages, joinParts } from '@tether/user-read/websocket';
import type { WebSocket } from 'ws';
import { type ForeignFrame, type FrameLink, type FrameLinkHandlers, NO_COPY } from './link.js';

const BINARY = { binary: true } as const;

/**
 * The pool of a relay socket whose owner gave none: slabs its inbound messages are assembled in, each
 * freed as soon as its frame was handled, so a few suffice.
 */
const INBOUND_POOL_OPTIONS = { step: 16 * 1024, maxPooledBytes: 2 * 1024 * 1024 } as const;

export interface RelayFrameReceiveOptions {
  /** Slabs inbound messages are assembled in; the caller's, which it closes. Default: the socket's own. */
  pool?: BufferPool;
  /** What the socket reads into (see FastMessageOptions.readBuffer). Default: the socket's own. */
  readBuffer?: Buffer;
}

export interface RelayFrameHandlers {
  /**
   * A frame. A Data frame's payload may be a view of a buffer reused once this returns: keep a copy, if
   * anything (a SecureStream decrypts it at once or copies it); every other kind is the frame's own copy.
   */
  onFrame(frame: Frame): void;
  /** A binary message that is not a relay frame. */
  onInvalid(error: FrameError): void;
  /** A text message (relay frames are binary only). */
  onText(): void;
}

/**
 * Reads relay frames off an endpoint's relay socket (a harness's, or the executor's multiplexed one): the
 * common case, a binary message, through `installFastMessages` (no buffer per read or per message), every
 * other message through `ws`'s 'message' event. `maxPayload` is the socket's own message limit.
 */
export function receiveRelayFrames(
  ws: WebSocket,
  maxPayload: number,
  handlers: RelayFrameHandlers,
  options: RelayFrameReceiveOptions = {},
): void {
  let inbound = options.pool;
  if (!inbound) {
    // The socket's own pool goes with the socket (a slab in use at that moment is dropped when released).
    const own = new BufferPool(INBOUND_POOL_OPTIONS);
    ws.once('close', () => own.close());
    inbound = own;
  }
  const pool = inbound;
  const binary = (data: Uint8Array, volatile: boolean) => {
    let frame: Frame;
    try {
      frame = decodeFrame(data, NO_COPY);
      // Only a Data payload is handled before the buffer is reused; a handshake's is kept, say.
      if (volatile && frame.kind !== 'data') frame = decodeFrame(data);
    } catch (err) {
      if (err instanceof FrameError) return handlers.onInvalid(err);
      throw err;
    }
    handlers.onFrame(frame);
  };
  ws.on('message', (data: Buffer, isBinary: boolean) => {
    // ws hands over each message's buffer and never writes to it again: payloads may be views.
    if (isBinary) binary(data, false);
    else handlers.onText();
  });
  installFastMessages(ws, {
    server: false,
    maxPayload,
    lease: (size) => pool.lease(size),
    ...(options.readBuffer ? { readBuffer: options.readBuffer } : {}),
    onMessage: (parts, length, slab) => {
      binary(joinParts(parts, length), slab !== null);
      return false; // handled: the slab goes back to the pool
    },
  });
}

export interface WebSocketFrameLinkOptions {
  /**
   * Called for every frame dropped because it names another stream. The relay routes a harness socket
   * only its own stream's frames, so one is a fault in the relay or in this process's receive path, and
   * the stream then usually waits forever for the frame it missed. Default: one process warning
   * (`TETHER_FOREIGN_FRAME`) for the first such frame of the link, so that it is never silent.
   */
  onForeignFrame?(frame: ForeignFrame): void;
  /** Slabs the link's inbound messages are assembled in, from its creator, which closes it. Default: its own. */
  pool?: BufferPool;
}

/**
 * A harness's relay socket carrying one stream: binary messages only, one protobuf frame each
 * (rendezvous.md §3.1). A text message or an undecodable frame is a protocol error that ends the link;
 * frames for another stream id are dropped, counted (`foreignFrames`) and reported (`onForeignFrame`).
 */
export class WebSocketFrameLink implements FrameLink {
  private handlers: FrameLinkHandlers | null = null;
  private needsDrain = false;
  private closed = false;
  private foreign = 0;
  private readonly onForeignFrame: (frame: ForeignFrame) => void;
  private readonly inbound: BufferPool;
  private readonly ownsPool: boolean;
  /** Frames sent in one burst leave in one write (`burstWrites`). */
  private readonly burst: () => void;

  constructor(
    private readonly ws: WebSocket,
    private readonly streamId: string,
    options: WebSocketFrameLinkOptions = {},
  ) {
    this.onForeignFrame = options.onForeignFrame ?? warnOnceOfForeignFrames();
    this.ownsPool = options.pool === undefined;
    this.inbound = options.pool ?? new BufferPool(INBOUND_POOL_OPTIONS);
    this.burst = burstWrites(ws);
  }

  /** The pool inbound messages are assembled in (the creator's, or the link's own). */
  get inboundPool(): BufferPool {
    return this.inbound;
  }

  get bufferedAmount(): number {
    return this.ws.bufferedAmount;
  }

  /** Frames dropped so far because they named another stream. */
  get foreignFrames(): number {
    return this.foreign;
  }

  start(handlers: FrameLinkHandlers): void {
    this.handlers = handlers;
    receiveRelayFrames(
      this.ws,
      MAX_FRAME_BYTES,
      {
        onFrame: (frame) => {
          if (this.closed) return;
          if (frame.streamId === this.streamId) {
            handlers.onFrame(frame);
            return;
          }
          this.foreign++;
          this.onForeignFrame({
            streamId: this.streamId,
            foreignStreamId: frame.streamId,
            kind: frame.kind,
            dropped: this.foreign,
          });
        },
        onInvalid: (err) => {
          if (!this.closed) this.fail(`relay sent an invalid frame: ${err.message}`);
        },
        onText: () => {
          if (!this.closed) this.fail('relay sent a text message');
        },
      },
      { pool: this.inbound },
    );
    this.ws.once('close', (code: number) => this.finish(`relay socket closed (${code})`));
    this.ws.on('error', (err: Error) => this.finish(`relay socket error: ${err.message}`));
  }

  send(frame: Frame, release?: () => void): boolean {
    if (this.closed) {
      release?.();
      return false;
    }
    this.burst();
    this.ws.send(encodeFrame(frame), BINARY, releasingCallback(release, this.afterWrite));
    if (this.ws.bufferedAmount > DEFAULT_HIGH_WATER_MARK) this.needsDrain = true;
    return !this.needsDrain;
  }

  pause(): void {
    this.ws.pause();
  }

  resume(): void {
    if (!this.closed) this.ws.resume();
  }

  close(reason: string): void {
    // Read again if paused: the close handshake needs the peer's close frame, which a paused socket never reads
    // (ws would then wait its 30 s close timeout with the socket held open, and its process with it).
    this.ws.resume();
    if (this.ws.readyState === this.ws.OPEN || this.ws.readyState === this.ws.CONNECTING) this.ws.close(1000);
    this.finish(reason);
  }

  private readonly afterWrite = (err?: Error): void => {
    if (!err && this.needsDrain && this.ws.bufferedAmount <= DEFAULT_LOW_WATER_MARK) {
      this.needsDrain = false;
      this.handlers?.onDrain();
    }
  };

  private fail(reason: string): void {
    this.ws.close(1002, 'protocol error');
    this.finish(reason);
  }

  private finish(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    if (this.ownsPool) this.inbound.close();
    this.handlers?.onClose(reason);
  }
}

/** The default report of foreign frames: a process warning for a link's first one (the SDK has no logger). */
function warnOnceOfForeignFrames(): (frame: ForeignFrame) => void {
  let warned = false;
  return (frame) => {
    if (warned) return;
    warned = true;
    process.emitWarning(
      `relay stream ${frame.streamId} dropped a ${frame.kind} frame of stream ${frame.foreignStreamId}: ` +
        'the relay sent another stream on this socket, or the receive path misread a frame (further ones are counted, not reported)',
      { code: 'TETHER_FOREIGN_FRAME' },
    );
  };
}
