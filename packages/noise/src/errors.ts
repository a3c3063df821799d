/** Stable machine-readable codes: match on `code`, never on message text. */
export type NoiseErrorCode =
  | 'invalid_public_key'
  | 'invalid_identity'
  | 'invalid_message'
  | 'invalid_state'
  | 'handshake_failed'
  | 'decrypt_failed'
  | 'nonce_exhausted'
  | 'payload_too_large'
  | 'bad_suite';

/** The one error class this package throws; `name` survives duplicate package copies where instanceof fails. */
export class NoiseError extends Error {
  static readonly NAME = 'NoiseError';
  override readonly name = NoiseError.NAME;
  readonly code: NoiseErrorCode;

  constructor(code: NoiseErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

export function isNoiseError(value: unknown, code?: NoiseErrorCode): value is NoiseError {
  return (
    value instanceof Error &&
    value.name === NoiseError.NAME &&
    (code === undefined || (value as NoiseError).code === code)
  );
}
