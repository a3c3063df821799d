/**
 * What the package picks by default on Node (`#platform`, package.json `imports`): node:crypto's provider
 * (with @tether/native-crypto's records when built) and node:crypto's ML-KEM-768 where this Node has it.
 */
export { createNodeProvider as defaultProvider } from '../crypto/node.js';
export { nodeMlKem as nativeMlKem } from '../kem/ml-kem-768-node.js';
