/**
 * The package without Node: what a browser build gets for `@tether/noise` (the `browser` condition of its
 * `exports`). Its defaults come from `#platform` (portable provider, noble's ML-KEM); `index.ts` adds the
 * node:crypto provider and identity files.
 */
export { decodeBase64Strict, encodeBase64 } from './base64.js';
export { CipherState } from './cipher-state.js';
export { createPortableProvider } from './crypto/portable.js';
export { type AesGcmSubtle, createWebCryptoProvider, type WebCryptoProviderOptions } from './crypto/webcrypto.js';
export {
  type AsyncAead,
  CIPHER_KEY_LENGTH,
  type CipherName,
  type CryptoProvider,
  HASH_LENGTH,
  hkdf,
  type Kem,
  type KemEncapsulation,
  type KeyedAead,
  type KeyPair,
  NONCE_LENGTH,
  oneShotAead,
  type RandomOptions,
  TAG_LENGTH_BYTES,
  X25519_KEY_LENGTH,
} from './crypto.js';
export { isNoiseError, NoiseError, type NoiseErrorCode } from './errors.js';
export {
  ClassicIKHandshake,
  type HandshakeStateOptions,
  type HandshakeStep,
  HybridIKHandshake,
  type HybridIKOptions,
  type Role,
} from './handshake-state.js';
export {
  type GenerateIdentityOptions,
  generateIdentity,
  identityFromFileJson,
  identityToFileJson,
  NoiseIdentity,
  type NoiseIdentityFileJson,
  type StaticKeys,
} from './identity.js';
export {
  createMlKem768,
  defaultMlKemBackend,
  MLKEM768_CIPHERTEXT_LENGTH,
  MLKEM768_PUBLIC_KEY_LENGTH,
  MLKEM768_SECRET_KEY_LENGTH,
  MLKEM768_SHARED_SECRET_LENGTH,
  type MlKemBackend,
  type MlKemOptions,
} from './kem/ml-kem-768.js';
export {
  checkPublicKey,
  MLKEM768_PUBLIC_KEY_BASE64_LENGTH,
  type NoisePublicKey,
  type NoisePublicKeyJson,
  parsePublicKey,
  parsePublicKeyJson,
  publicKeyToJson,
  serializePublicKey,
  X25519_PUBLIC_KEY_BASE64_LENGTH,
} from './keys.js';
export { MAX_HANDSHAKE_PAYLOAD, MAX_NOISE_MESSAGE_LENGTH, MAX_TRANSPORT_PLAINTEXT } from './limits.js';
export { MAX_NONCE, Nonce } from './nonce.js';
export { buildRelayPrologue, encodePrologue, PROLOGUE_DOMAIN, type RelayPrologueIds } from './prologue.js';
export {
  createInitiator,
  createResponder,
  HYBRID_MESSAGE1_OVERHEAD,
  HYBRID_MESSAGE2_LENGTH,
  type Initiator,
  type InitiatorOptions,
  type PendingResponder,
  type Responder,
  type ResponderOptions,
} from './session.js';
export {
  DEFAULT_SUITE,
  isSuite,
  PROTOCOL_NAME_CLASSIC_IK,
  PROTOCOL_NAME_HYBRID_AESGCM,
  PROTOCOL_NAME_HYBRID_CHACHAPOLY,
  SECURITY_PROFILE_HYBRID_IK_V1,
  SUITE_HYBRID_AESGCM,
  SUITE_HYBRID_CHACHAPOLY,
  SUITE_NAMES,
  type Suite,
  type SuiteInfo,
  suiteInfo,
} from './suite.js';
export { SymmetricState } from './symmetric-state.js';
export { Transport } from './transport.js';
