export {
  loadOrCreateSigningKey,
  type RelayGrant,
  type SigningKey,
  signingKeyFromPem,
  signRelayUrl,
  verifyRelayUrl,
} from '@tether/relay-auth';
export { buildRegistry, type RegistryConfig, type RegistryDeps } from './app.js';
export { ERRORS, type ErrorCode, RegistryError } from './errors.js';
export { pickRelayNode } from './routing.js';
export * from './store/index.js';
export { generateToken, hashToken, matchesEnvironmentGlob } from './tokens.js';
