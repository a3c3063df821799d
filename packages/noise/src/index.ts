/** The package on Node: everything of the browser entry, plus the node:crypto provider and identity files. */
export * from './browser.js';
export { type AeadBackend, createNodeProvider, type NodeProviderOptions } from './crypto/node.js';
export { IDENTITY_FILE_MODE, loadIdentity, saveIdentity } from './identity-file.js';
