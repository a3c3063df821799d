export {
  createMemoryLinkPair,
  type FrameLink,
  type FrameLinkHandlers,
  type RelayFrameHandlers,
  receiveRelayFrames,
  WebSocketFrameLink,
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
