import type { Socket } from 'node:net';
import { DEFAULT_HIGH_WATER_MARK } from '@tether/bytes';
import type { MessageTransport, TransportHandlers } from '@tether/jsonrpc';

/** Bytes of the length prefix before every message. */
const PREFIX_BYTES = 4;
/**
 * The largest message either way: the relay's secure stream carries messages up to 64 MiB
 * (relay-frames `MAX_MESSAGE_BYTES`), and a spliced channel forwards those unchanged. A longer length
 * closes the channel (`message too large`): it is a broken or hostile peer, not data to buffer.
 */
export const MAX_SOCKET_MESSAGE_BYTES = 64 * 1024 * 1024;
/** A graceful close that the peer does not finish within this is cut. */
const CLOSE_GRACE_MS = 2_000;

export interface SocketMessageTransportOptions {
  label?: string;
  /** Bytes already read from the socket after what its owner consumed (they are parsed first). */
  initial?: Buffer;
  maxMessageBytes?: number;
}

/**
 * JSON-RPC messages over a local stream socket (a unix socket to the harness's connection master): each
 * message is a u32 big-endian length and that many bytes, exactly the bytes a relay secure stream carries
 * (JSON text, or an attachment message: `0x01 | header | JSON | bytes`), so a master splices them between
 * a pooled secure stream and this socket without parsing them. Honours backpressure both ways: `send`
 * returns false above the high-water mark (`onDrain` follows) and `pause` stops reading the socket.
 */
export class SocketMessageTransport implements MessageTransport {
  readonly kind = 'relay' as const;
  readonly carriesAttachments = true;
  readonly label: string;
  private readonly maxMessageBytes: number;
  private handlers: TransportHandlers | null = null;
  /** Received bytes not yet delivered (a partial message, or whole ones held while paused). */
  private chunks: Buffer[] = [];
  private buffered = 0;
  private paused = false;
  private delivering = false;
  private needsDrain = false;
  private closed = false;
  private closeTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly socket: Socket,
    options: SocketMessageTransportOptions = {},
  ) {
    this.label = options.label ?? 'local channel';
    this.maxMessageBytes = options.maxMessageBytes ?? MAX_SOCKET_MESSAGE_BYTES;
    if (options.initial && options.initial.length > 0) {
      this.chunks.push(options.initial);
      this.buffered = options.initial.length;
    }
  }

  get bufferedAmount(): number {
    return this.socket.writableLength;
  }

  start(handlers: TransportHandlers): void {
    if (this.handlers) throw new Error('SocketMessageTransport.start called twice');
    this.handlers = handlers;
    this.socket.on('data', this.onData);
    this.socket.on('drain', this.onSocketDrain);
    this.socket.once('error', (err: Error) => this.finish(`socket error: ${err.message}`));
    this.socket.once('close', () => this.finish('peer closed'));
    this.socket.once('end', () => this.finish('peer closed'));
    if (this.socket.destroyed) {
      this.finish('peer closed');
      return;
    }
    this.deliver();
    // Its owner may have paused the socket while reading what came before (a control exchange).
    if (!this.paused) this.socket.resume();
  }

  send(message: string | Buffer, release?: () => void): boolean {
    if (this.closed) {
      release?.();
      return false;
    }
    const bytes = typeof message === 'string' ? Buffer.from(message, 'utf8') : message;
    if (bytes.length > this.maxMessageBytes) {
      release?.();
      throw new Error(`message of ${bytes.length} bytes exceeds the channel's ${this.maxMessageBytes}`);
    }
    const prefix = Buffer.allocUnsafe(PREFIX_BYTES);
    prefix.writeUInt32BE(bytes.length, 0);
    this.socket.cork();
    this.socket.write(prefix);
    const ok = this.socket.write(bytes, release ? () => release() : undefined);
    this.socket.uncork();
    if (!ok || this.socket.writableLength > DEFAULT_HIGH_WATER_MARK) this.needsDrain = true;
    return !this.needsDrain;
  }

  pause(): void {
    this.paused = true;
    this.socket.pause();
  }

  resume(): void {
    if (this.closed) return;
    this.paused = false;
    this.deliver();
    if (!this.paused) this.socket.resume();
  }

  close(_code?: number, reason = 'closed'): void {
    if (this.closed) return;
    // Once everything sent is with the kernel, the peer's close is not worth waiting for: a harness command
    // exits then instead of a round of the master's teardown later.
    this.socket.end(() => this.socket.unref());
    this.closeTimer = setTimeout(() => this.socket.destroy(), CLOSE_GRACE_MS);
    this.closeTimer.unref();
    this.finish(reason);
  }

  private readonly onData = (chunk: Buffer): void => {
    if (this.closed) return;
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    this.deliver();
  };

  private readonly onSocketDrain = (): void => {
    if (!this.needsDrain || this.closed) return;
    this.needsDrain = false;
    this.handlers?.onDrain();
  };

  /** Hands every whole message received to the handler, until paused. */
  private deliver(): void {
    if (this.delivering || !this.handlers) return;
    this.delivering = true;
    try {
      while (!this.paused && !this.closed && this.buffered >= PREFIX_BYTES) {
        const length = this.peekLength();
        if (length > this.maxMessageBytes) {
          this.socket.destroy();
          this.finish(`message too large (${length} bytes, at most ${this.maxMessageBytes})`);
          return;
        }
        if (this.buffered < PREFIX_BYTES + length) break;
        this.take(PREFIX_BYTES);
        this.handlers.onMessage(this.take(length));
      }
    } finally {
      this.delivering = false;
    }
  }

  private peekLength(): number {
    const first = this.chunks[0]!;
    if (first.length >= PREFIX_BYTES) return first.readUInt32BE(0);
    return this.take(PREFIX_BYTES, true).readUInt32BE(0);
  }

  /** The next `count` bytes (a view when they sit in one chunk, else a copy); `peek` leaves them. */
  private take(count: number, peek = false): Buffer {
    const first = this.chunks[0]!;
    if (first.length >= count) {
      if (peek) return first.subarray(0, count);
      const out = first.subarray(0, count);
      if (first.length === count) this.chunks.shift();
      else this.chunks[0] = first.subarray(count);
      this.buffered -= count;
      return out;
    }
    const out = Buffer.allocUnsafe(count);
    let filled = 0;
    let index = 0;
    while (filled < count) {
      const chunk = this.chunks[index]!;
      const n = Math.min(chunk.length, count - filled);
      chunk.copy(out, filled, 0, n);
      filled += n;
      if (peek) {
        index++;
        continue;
      }
      if (n === chunk.length) this.chunks.shift();
      else this.chunks[0] = chunk.subarray(n);
    }
    if (!peek) this.buffered -= count;
    return out;
  }

  private finish(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.chunks = [];
    this.buffered = 0;
    this.socket.off('data', this.onData);
    this.socket.off('drain', this.onSocketDrain);
    this.socket.once('close', () => {
      if (this.closeTimer) clearTimeout(this.closeTimer);
    });
    this.handlers?.onClose(reason);
  }
}
