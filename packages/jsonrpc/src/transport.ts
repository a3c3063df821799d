/**
 * A message transport: one JSON-RPC message per unit (a stdio line, a WebSocket frame, a secure-stream
 * record). Every transport becomes the same RpcConnection, so the core never knows which one it has.
 */
export type TransportKind = 'stdio' | 'websocket' | 'relay';

export interface TransportHandlers {
  /**
   * One message. `release`, when given, says its bytes sit in a pooled buffer of the transport's: whoever
   * holds them last calls it (once) when nothing reads them any more, and the buffer serves a later message.
   * Never called, the buffer is simply garbage.
   */
  onMessage(data: string | Buffer, release?: () => void): void;
  /** Called once when the transport is gone, for whatever reason. */
  onClose(reason: string): void;
  /** The outbound buffer fell back below the low-water mark. */
  onDrain(): void;
}

export interface MessageTransport {
  readonly kind: TransportKind;
  /** Used in error messages and logs, e.g. `exec-server stdio` or `exec-server websocket 127.0.0.1:5000`. */
  readonly label: string;
  /** Whether messages with a binary attachment (`attachment.ts`) can travel: not over stdio's lines. */
  readonly carriesAttachments: boolean;
  /** Starts delivering messages to the handlers; called once. */
  start(handlers: TransportHandlers): void;
  /**
   * Queues one message (a string, or its UTF-8 bytes: sent as text; bytes with a binary attachment, as
   * binary where the transport carries them); returns false when the
   * outbound buffer is above its high-water mark. `release`, if given, is called at most once, when the
   * transport no longer reads `message` (written to the kernel, copied, or dropped), so that its buffer
   * can be reused; a transport that cannot tell never calls it.
   */
  send(message: string | Buffer, release?: () => void): boolean;
  /** Bytes queued and not yet written. */
  readonly bufferedAmount: number;
  /** Stop and restart reading inbound messages (backpressure toward the peer). */
  pause(): void;
  resume(): void;
  /** Graceful close; idempotent. */
  close(code?: number, reason?: string): void;
}

/** Default limit of one inbound message; larger ones are refused (WebSocket close 1009, stdio error). */
export const DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024;
