/**
 * The package without Node (the `browser` condition of its `exports`): messages, connection, client, lanes
 * and the in-memory transport. `index.ts` adds the stdio and `ws` WebSocket transports.
 */
export {
  ATTACHMENT,
  ATTACHMENT_MARKER,
  attachmentOf,
  encodeWithAttachment,
  hasAttachmentMarker,
  releaseAttachment,
  splitAttachment,
  takeAttachmentRelease,
} from './attachment.js';
export { type CallOptions, RpcClient, type RpcClientOptions, RpcTimeoutError } from './client.js';
export {
  ConnectionClosedError,
  type ConnectionHandlers,
  type ConnectionStatus,
  malformedMessageText,
  RpcConnection,
} from './connection.js';
export { type Lane, type LanesOptions, MAX_CONCURRENT_REQUESTS, RequestLanes } from './lanes.js';
export {
  classifyMessage,
  type InboundMessage,
  MALFORMED_MESSAGE_ID,
  parseMessage,
  type RequestId,
  type RpcErrorObject,
  serializeError,
  serializeNotification,
  serializeRequest,
  serializeResponse,
} from './message.js';
export { type OutboundAnswer, OutboundRequests, type OutboundRequestsOptions } from './outbound.js';
export {
  DEFAULT_MAX_MESSAGE_BYTES,
  type MessageTransport,
  type TransportHandlers,
  type TransportKind,
} from './transport.js';
export { createMemoryTransportPair, MemoryTransport } from './transports/memory.js';
