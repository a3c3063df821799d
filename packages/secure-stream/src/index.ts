export {
  createMemoryLinkPair,
  type ForeignFrame,
  type FrameLink,
  type FrameLinkHandlers,
  type RelayFrameHandlers,
  type RelayFrameReceiveOptions,
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
  type SecureStreamPools,
} from './secure-stream.js';
