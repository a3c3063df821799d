/** The secure stream's error and the Reset reasons it sends. */
/** Reset reason sent on any failure; opaque to the peer (Codex's newest text). */
export const PROTOCOL_ERROR_RESET = 'noise_relay_protocol_error';
/** Reset reason sent when this side closes the stream normally. */
export const CLOSED_RESET = 'stream_closed';
/** How long a handshake may take before the stream is given up. */
export const DEFAULT_HANDSHAKE_TIMEOUT_MS = 10_000;

export class SecureStreamError extends Error {
  static readonly NAME = 'SecureStreamError';
  override readonly name = SecureStreamError.NAME;
  /** With code `reset`: the reason the Reset frame carried (the relay's, or the peer's opaque one). */
  readonly resetReason: string | undefined;
  constructor(
    readonly code: 'reset' | 'handshake_failed' | 'unauthorized' | 'timeout' | 'protocol' | 'closed',
    message: string,
    options?: { cause?: unknown; resetReason?: string },
  ) {
    super(message, options);
    this.resetReason = options?.resetReason;
  }
}
