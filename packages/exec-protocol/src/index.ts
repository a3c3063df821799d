/** The protocol on Node: the browser entry, plus host path ↔ `file:` URI conversion (node:url). */
export * from './browser.js';
export { FileUriError, fileUriToPath, pathToFileUri } from './file-uri.js';
