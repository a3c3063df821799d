export {
  type CodecOptions,
  DataFrameEncoder,
  type DecodeOptions,
  decodeFrame,
  encodeFrame,
} from './codec.js';
export { copyBytes } from './copy.js';
export {
  FrameError,
  type FrameErrorCode,
  MessageFramingError,
  type MessageFramingErrorCode,
  SequenceError,
  type SequenceErrorCode,
} from './errors.js';
export {
  type AckFrame,
  ackFrame,
  type DataFrame,
  dataFrame,
  FRAME_KINDS,
  type Frame,
  type FrameHeader,
  type FrameKind,
  type FrameOptions,
  type HandshakeFrame,
  type HeartbeatFrame,
  handshakeFrame,
  heartbeatFrame,
  isValidStreamId,
  type ResetFrame,
  type ResumeFrame,
  resetFrame,
  resumeFrame,
  validateFrame,
} from './frame.js';
export {
  MAX_FRAME_BYTES,
  MAX_MESSAGE_BYTES,
  MAX_RECORD_PLAINTEXT_BYTES,
  MAX_REORDER_BYTES,
  MAX_REORDER_DISTANCE,
  MAX_REORDER_RECORDS,
  MAX_RESET_REASON_BYTES,
  MAX_SEQ,
  MAX_STREAM_ID_BYTES,
  MESSAGE_LENGTH_PREFIX_BYTES,
  RELAY_LIMITS,
  RELAY_PROTOCOL_VERSION,
} from './limits.js';
export { OrderedReceiveWindow, type OrderedReceiveWindowOptions, SendSequence } from './ordered-window.js';
export { type FrameHeaderPeek, peekHeader, peekHeaderParts, streamIdOfKey, streamKey } from './peek.js';
export { frameMessage, frameMessageParts, MessageReassembler } from './record-framing.js';
export { relaySocketMask } from './socket-mask.js';
