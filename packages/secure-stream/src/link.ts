/**
 * Relay frames of one stream in both directions (`FrameLink`), and two links joined in memory. The link on a
 * `ws` socket is ws-link.ts's (Node only); a page has its own on the browser's WebSocket.
 */
import { decodeFrame, encodeFrame, type Frame, type FrameKind } from '@tether/relay-frames';

export interface FrameLinkHandlers {
  onFrame(frame: Frame): void;
  /** Called once when the link is gone. */
  onClose(reason: string): void;
  /** The outbound buffer fell back below the low-water mark. */
  onDrain(): void;
}

/**
 * Relay frames for one stream, in both directions. The harness's link is its own WebSocket; the
 * executor's is one virtual stream of its multiplexed relay socket. Frames of other streams never reach
 * a link's handlers.
 */
export interface FrameLink {
  start(handlers: FrameLinkHandlers): void;
  /**
   * Queues a frame; false when the outbound buffer is above the high-water mark. `release`, if given, is
   * called once the link no longer reads the frame's bytes (written, copied or dropped).
   */
  send(frame: Frame, release?: () => void): boolean;
  readonly bufferedAmount: number;
  pause(): void;
  resume(): void;
  close(reason: string): void;
}

/** Decoding without copying a Data payload (the caller keeps the bytes alive while the frame is handled). */
export const NO_COPY = { copyPayload: false } as const;

/** A frame a link dropped because it names another stream. */
export interface ForeignFrame {
  /** The link's own stream. */
  readonly streamId: string;
  /** The stream the frame names. */
  readonly foreignStreamId: string;
  readonly kind: FrameKind;
  /** Frames this link has dropped as foreign so far, this one included. */
  readonly dropped: number;
}

/** Two links joined in memory (what one sends the other receives, asynchronously); for tests. */
export function createMemoryLinkPair(): [FrameLink, FrameLink] {
  const a = new MemoryFrameLink();
  const b = new MemoryFrameLink();
  a.peer = b;
  b.peer = a;
  return [a, b];
}

class MemoryFrameLink implements FrameLink {
  peer: MemoryFrameLink | null = null;
  readonly bufferedAmount = 0;
  private handlers: FrameLinkHandlers | null = null;
  private closed = false;
  private readonly inbox: Uint8Array[] = [];
  private scheduled = false;

  /** Frames pass through the codec, as on a socket, and arrive in batches on a later turn. */
  deliver(bytes: Uint8Array): void {
    this.inbox.push(bytes);
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      for (const frame of this.inbox.splice(0)) {
        if (this.closed) return;
        this.handlers?.onFrame(decodeFrame(frame, NO_COPY)); // each encoded frame is delivered once
      }
    });
  }
  start(handlers: FrameLinkHandlers): void {
    this.handlers = handlers;
  }
  send(frame: Frame, release?: () => void): boolean {
    if (this.closed) {
      release?.();
      return false;
    }
    const bytes = encodeFrame(frame);
    // The receiver keeps views of what it is given: a buffer its sender will reuse goes over as a copy.
    this.peer?.deliver(release ? Uint8Array.prototype.slice.call(bytes) : bytes);
    release?.();
    return true;
  }
  pause(): void {}
  resume(): void {}
  close(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.handlers?.onClose(reason);
    const peer = this.peer;
    setImmediate(() => peer?.close('peer closed'));
  }
}
