import { ErrorCode } from '@tether/exec-protocol';
import {
  MALFORMED_MESSAGE_ID,
  type MessageTransport,
  malformedMessageText,
  serializeError,
  type TransportHandlers,
} from '@tether/jsonrpc';
import { TAG_LENGTH_BYTES } from '@tether/noise';
import { MAX_RECORD_PLAINTEXT_BYTES, MAX_REORDER_BYTES, MESSAGE_LENGTH_PREFIX_BYTES } from '@tether/relay-frames';

/**
 * The ciphertext a message of `maxMessageBytes` can take on the wire, plus what may be counted against
 * it that belongs elsewhere: one record (the one that completed the previous message may start this one)
 * and the records the ordered window parks ahead of it. Past this, the message being reassembled is
 * certainly larger than the limit.
 */
export function inboundBytesBound(maxMessageBytes: number): number {
  const framed = MESSAGE_LENGTH_PREFIX_BYTES + maxMessageBytes;
  const records = Math.ceil(framed / MAX_RECORD_PLAINTEXT_BYTES);
  return framed + records * TAG_LENGTH_BYTES + MAX_RECORD_PLAINTEXT_BYTES + TAG_LENGTH_BYTES + MAX_REORDER_BYTES;
}

/** How the link under a secure stream meters inbound bytes between messages (multiplexer.ts). */
export interface InboundMeter {
  /** A whole message was delivered: the count of inbound bytes starts again. */
  messageDelivered(): void;
  /** Called once when the bytes since the last message pass `inboundBytesBound`. */
  onOverflow: (() => void) | null;
}

/**
 * A relay stream's messages held to `max_message_bytes`, as stdio and the WebSocket listener hold theirs
 * (a secure stream on its own reassembles whatever its records declare, up to the framing's 64 MiB). A
 * complete message over the limit is answered with the error stdio gives (id -1, Codex's "failed to
 * parse" wording) and dropped; the stream goes on. A message still arriving whose bytes already pass the
 * limit (the meter's bound) is answered the same way and the stream is reset: it cannot be skipped
 * without reading it, and reading it is what the limit is for.
 */
export class BoundedTransport implements MessageTransport {
  constructor(
    private readonly inner: MessageTransport,
    private readonly maxMessageBytes: number,
    private readonly meter: InboundMeter | null = null,
  ) {}

  get kind() {
    return this.inner.kind;
  }

  get label(): string {
    return this.inner.label;
  }

  get carriesAttachments(): boolean {
    return this.inner.carriesAttachments;
  }

  get bufferedAmount(): number {
    return this.inner.bufferedAmount;
  }

  start(handlers: TransportHandlers): void {
    if (this.meter) {
      this.meter.onOverflow = () => {
        this.refuse(`message of more than ${this.maxMessageBytes} bytes (still arriving) exceeds the limit`);
        this.inner.close(1009, 'message too large');
      };
    }
    this.inner.start({
      ...handlers,
      // The message's release (a pooled buffer's, from the secure stream) goes on with it: dropping it here left
      // every 1 MiB block of an upload to the collector instead of its pool.
      onMessage: (data, release) => {
        this.meter?.messageDelivered();
        const bytes = typeof data === 'string' ? Buffer.byteLength(data) : data.byteLength;
        if (bytes > this.maxMessageBytes) {
          release?.();
          this.refuse(`message of ${bytes} bytes exceeds the limit of ${this.maxMessageBytes} bytes`);
          return;
        }
        handlers.onMessage(data, release);
      },
    });
  }

  private refuse(reason: string): void {
    this.inner.send(
      serializeError(MALFORMED_MESSAGE_ID, {
        code: ErrorCode.invalidRequest,
        message: malformedMessageText(this.inner, reason),
      }),
    );
  }

  send(message: string | Buffer, release?: () => void): boolean {
    return this.inner.send(message, release);
  }

  pause(): void {
    this.inner.pause();
  }

  resume(): void {
    this.inner.resume();
  }

  close(code?: number, reason?: string): void {
    this.inner.close(code, reason);
  }
}
