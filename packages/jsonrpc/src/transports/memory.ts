import { hasAttachmentMarker } from '../attachment.js';
import type { MessageTransport, TransportHandlers, TransportKind } from '../transport.js';

/**
 * Two connected in-memory transports: what one sends, the other receives (asynchronously, in order).
 * For in-process connections and tests; behaves like a socket whose buffer never fills.
 */
export function createMemoryTransportPair(kind: TransportKind = 'websocket'): [MemoryTransport, MemoryTransport] {
  const a = new MemoryTransport(kind, 'memory a');
  const b = new MemoryTransport(kind, 'memory b');
  a.peer = b;
  b.peer = a;
  return [a, b];
}

export class MemoryTransport implements MessageTransport {
  readonly bufferedAmount = 0;
  /** @internal */
  peer: MemoryTransport | null = null;
  private handlers: TransportHandlers | null = null;
  private readonly inbox: Array<string | Buffer> = [];
  private paused = false;
  private closed = false;
  private scheduled = false;
  private closeAfterInbox = false;

  /** Like the transport it stands in for: a memory "stdio" carries only text. */
  readonly carriesAttachments: boolean;

  constructor(
    readonly kind: TransportKind,
    readonly label: string,
  ) {
    this.carriesAttachments = kind !== 'stdio';
  }

  start(handlers: TransportHandlers): void {
    this.handlers = handlers;
    this.schedule();
  }

  send(message: string | Buffer, release?: () => void): boolean {
    if (this.closed || !this.peer || this.peer.closed) {
      release?.();
      return false;
    }
    if (hasAttachmentMarker(message)) {
      if (!this.carriesAttachments)
        throw new Error(`a message with a binary attachment cannot be sent over ${this.kind}`);
      this.peer.inbox.push(Buffer.from(message as Buffer));
    } else {
      this.peer.inbox.push(typeof message === 'string' ? message : message.toString('utf8'));
    }
    release?.(); // copied above
    this.peer.schedule();
    return true;
  }

  pause(): void {
    this.paused = true;
  }

  resume(): void {
    this.paused = false;
    this.schedule();
  }

  close(): void {
    if (this.closed) return;
    this.finish('closed');
    // The peer still receives what was sent before the close, then sees the close (like a socket).
    if (this.peer) {
      this.peer.closeAfterInbox = true;
      this.peer.schedule();
    }
  }

  private schedule(): void {
    if (this.scheduled || !this.handlers || this.closed) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      while (!this.paused && !this.closed && this.inbox.length > 0) this.handlers?.onMessage(this.inbox.shift()!);
      if (this.closeAfterInbox && this.inbox.length === 0) this.finish('peer closed');
    });
  }

  private finish(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.inbox.length = 0;
    this.handlers?.onClose(reason);
  }
}
