export { CLOSED_RESET, DEFAULT_HANDSHAKE_TIMEOUT_MS, PROTOCOL_ERROR_RESET, SecureStreamError } from './errors.js';
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
export type { AcceptOptions, InitiateOptions, SecureStreamPools } from './options.js';
export { type AcceptedStream, SecureStream } from './secure-stream.js';
