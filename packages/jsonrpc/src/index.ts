/** The package on Node: the browser entry, plus the stdio and `ws` WebSocket transports. */
export * from './browser.js';
export { StdioTransport, type StdioTransportOptions } from './transports/stdio.js';
export { WebSocketTransport, type WebSocketTransportOptions } from './transports/websocket.js';
