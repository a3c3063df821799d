export {
  REVOCATIONS_PATH,
  REVOCATIONS_SIGNATURE_HEADER,
  type RevocationNotice,
  type RevokedRegistration,
  revocationsMessage,
  signRevocations,
  verifyRevocations,
} from './revocations.js';
export {
  grantMessage,
  loadOrCreateSigningKey,
  publicKeyFromPem,
  type RelayGrant,
  type RelayRole,
  relayNodeOf,
  SIGNING_KEY_FILE,
  type SigningKey,
  signingKeyFromPem,
  signRelayUrl,
  type VerifyResult,
  verifyRelayRequest,
  verifyRelayUrl,
} from './signing.js';
