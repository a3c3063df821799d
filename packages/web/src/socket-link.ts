import { DEFAULT_HIGH_WATER_MARK, DEFAULT_LOW_WATER_MARK } from '@tether/bytes/bounds';
import { decodeFrame, encodeFrame, type Frame, FrameError } from '@tether/relay-frames';
import type { FrameLink, FrameLinkHandlers } from '@tether/secure-stream';

/** A browser WebSocket has no drain event: the queue is looked at this often while above the mark. */
const DRAIN_POLL_MS = 5;
/** `WebSocket.OPEN` and `CONNECTING` (the constants, so the link needs no global WebSocket to load). */
const CONNECTING = 0;
const OPEN = 1;

/**
 * A page's relay socket carrying one stream (rendezvous.md §3.1), over the browser's own WebSocket: binary
 * messages only, one protobuf frame each. A text message or an undecodable frame ends the link; a frame of
 * another stream is dropped and counted. The browser's socket cannot stop reading, so `pause` does nothing:
 * the exec protocol's flow window (process/ack) is what bounds what an executor sends ahead.
 */
export class BrowserSocketFrameLink implements FrameLink {
  private handlers: FrameLinkHandlers | null = null;
  private closed = false;
  private drainTimer: ReturnType<typeof setTimeout> | null = null;
  private foreign = 0;

  constructor(
    private readonly socket: WebSocket,
    private readonly streamId: string,
  ) {
    socket.binaryType = 'arraybuffer';
  }

  get bufferedAmount(): number {
    return this.socket.bufferedAmount;
  }

  /** Frames dropped so far because they named another stream. */
  get foreignFrames(): number {
    return this.foreign;
  }

  start(handlers: FrameLinkHandlers): void {
    this.handlers = handlers;
    this.socket.addEventListener('message', (event: MessageEvent) => {
      if (this.closed) return;
      if (!(event.data instanceof ArrayBuffer)) {
        this.fail('relay sent a text message');
        return;
      }
      let frame: Frame;
      try {
        frame = decodeFrame(new Uint8Array(event.data), { copyPayload: false });
      } catch (err) {
        if (err instanceof FrameError) {
          this.fail(`relay sent an invalid frame: ${err.message}`);
          return;
        }
        throw err;
      }
      if (frame.streamId !== this.streamId) {
        this.foreign++;
        return;
      }
      handlers.onFrame(frame);
    });
    this.socket.addEventListener('close', (event: CloseEvent) => this.finish(`relay socket closed (${event.code})`));
    this.socket.addEventListener('error', () => this.finish('relay socket error'));
  }

  send(frame: Frame, release?: () => void): boolean {
    if (this.closed || this.socket.readyState !== OPEN) {
      release?.();
      return false;
    }
    try {
      // The browser takes its own copy of the bytes in send(): the frame's buffer is free again at once.
      this.socket.send(encodeFrame(frame) as Uint8Array<ArrayBuffer>);
    } finally {
      release?.();
    }
    if (this.socket.bufferedAmount <= DEFAULT_HIGH_WATER_MARK) return this.drainTimer === null;
    this.watchDrain();
    return false;
  }

  pause(): void {}

  resume(): void {}

  close(reason: string): void {
    this.finish(reason);
    if (this.socket.readyState === OPEN || this.socket.readyState === CONNECTING) this.socket.close(1000);
  }

  private watchDrain(): void {
    if (this.drainTimer !== null) return;
    const check = () => {
      this.drainTimer = null;
      if (this.closed) return;
      if (this.socket.bufferedAmount > DEFAULT_LOW_WATER_MARK) {
        this.drainTimer = setTimeout(check, DRAIN_POLL_MS);
        return;
      }
      this.handlers?.onDrain();
    };
    this.drainTimer = setTimeout(check, DRAIN_POLL_MS);
  }

  private fail(reason: string): void {
    this.finish(reason);
    this.socket.close(1002, 'protocol error');
  }

  private finish(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    if (this.drainTimer !== null) clearTimeout(this.drainTimer);
    this.drainTimer = null;
    this.handlers?.onClose(reason);
  }
}
