/**
 * The package without Node (the `browser` condition of its `exports`): the secure stream over any `FrameLink`.
 * `index.ts` adds the link on a `ws` socket (ws-link.ts).
 */
export { CLOSED_RESET, DEFAULT_HANDSHAKE_TIMEOUT_MS, PROTOCOL_ERROR_RESET, SecureStreamError } from './errors.js';
export { createMemoryLinkPair, type ForeignFrame, type FrameLink, type FrameLinkHandlers } from './link.js';
export type { AcceptOptions, InitiateOptions, SecureStreamPools } from './options.js';
export { type AcceptedStream, SecureStream } from './secure-stream.js';
