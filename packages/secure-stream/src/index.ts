/** The package on Node: the browser entry, plus relay frames on a `ws` socket. */
export * from './browser.js';
export {
  type RelayFrameHandlers,
  type RelayFrameReceiveOptions,
  receiveRelayFrames,
  WebSocketFrameLink,
  type WebSocketFrameLinkOptions,
} from './ws-link.js';
