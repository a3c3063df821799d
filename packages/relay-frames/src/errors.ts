// Error family of this package. Callers match on `name` and `code` (stable strings), never on the message:
// `name` survives duplicate package copies where `instanceof` does not.

/** An error with a stable `code` (the family's classes below differ only in their codes and names). */
abstract class CodedError<Code extends string> extends Error {
  readonly code: Code;

  constructor(code: Code, message: string, options?: ErrorOptions) {
    super(message, options);
    this.code = code;
  }
}

/** Why a relay frame was refused, by the decoder or by a constructor/encoder. */
export type FrameErrorCode =
  | 'too_large'
  | 'malformed'
  | 'invalid_version'
  | 'invalid_stream_id'
  | 'missing_body'
  | 'invalid_data'
  | 'invalid_handshake'
  | 'invalid_reset'
  | 'invalid_resume'
  | 'invalid_header';

export class FrameError extends CodedError<FrameErrorCode> {
  static readonly NAME = 'FrameError';
  override readonly name = FrameError.NAME;
}

/** Why the length-prefixed JSON message framing inside the Noise channel failed (the stream must end). */
export type MessageFramingErrorCode = 'empty_message' | 'message_too_large' | 'record_too_large' | 'failed';

export class MessageFramingError extends CodedError<MessageFramingErrorCode> {
  static readonly NAME = 'MessageFramingError';
  override readonly name = MessageFramingError.NAME;
}

/** Why record sequencing failed (receive window overflow or u32 exhaustion); the stream must end. */
export type SequenceErrorCode =
  | 'window_distance'
  | 'window_records'
  | 'window_bytes'
  | 'seq_exhausted'
  | 'invalid_seq'
  | 'failed';

export class SequenceError extends CodedError<SequenceErrorCode> {
  static readonly NAME = 'SequenceError';
  override readonly name = SequenceError.NAME;
}
