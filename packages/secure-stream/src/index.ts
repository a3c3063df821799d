export {
  createMemoryLinkPair,
  type ForeignFrame,
  type FrameLink,
  type FrameLinkHandlers,
  type RelayFrameHandlers,
  receiveRelayFrames,
  WebSocketFrameLink,
  type WebSocketFrameLinkOptions,
} from './link.js';
export {
  type AcceptedStream,
  type AcceptOptions,
  CLOSED_RESET,
  DEFAULT_HANDSHAKE_TIMEOUT_MS,
  type InitiateOptions,
  PROTOCOL_ERROR_RESET,
  SecureStream,
  SecureStreamError,
} from './secure-stream.js';
