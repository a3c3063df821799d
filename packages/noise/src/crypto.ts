/** Cipher names as they appear in Noise protocol names. */
export type CipherName = 'AESGCM' | 'ChaChaPoly';

export interface KeyPair {
  readonly publicKey: Uint8Array;
  readonly secretKey: Uint8Array;
}

export const X25519_KEY_LENGTH = 32;
export const HASH_LENGTH = 32;
export const CIPHER_KEY_LENGTH = 32;
export const NONCE_LENGTH = 12;
/** AEAD tag length for both AES-256-GCM and ChaCha20-Poly1305. */
export const TAG_LENGTH_BYTES = 16;

/**
 * The primitives the Noise state machine needs (DH 25519, AEAD, SHA-256, HMAC, randomness).
 * Implementations: `createNodeProvider()` (node:crypto) and `createPortableProvider()` (noble/stablelib).
 * Tests override `generateKeyPair` or `randomBytes` to make runs deterministic.
 */
export interface CryptoProvider {
  readonly name: string;
  /** A fresh X25519 key pair; the secret comes from `randomBytes(32)`. */
  generateKeyPair(): KeyPair;
  /** X25519 public key for a 32-byte secret (RFC 7748 clamping is applied by the primitive). */
  publicKeyFromSecret(secretKey: Uint8Array): Uint8Array;
  /** X25519(secretKey, publicKey); throws on an all-zero (low-order) result. */
  dh(secretKey: Uint8Array, publicKey: Uint8Array): Uint8Array;
  /** AEAD seal: returns ciphertext ‖ 16-byte tag. */
  encrypt(cipher: CipherName, key: Uint8Array, nonce: Uint8Array, ad: Uint8Array, plaintext: Uint8Array): Uint8Array;
  /** AEAD open: throws on authentication failure. */
  decrypt(cipher: CipherName, key: Uint8Array, nonce: Uint8Array, ad: Uint8Array, ciphertext: Uint8Array): Uint8Array;
  /**
   * Optional fast path for transport records: an AEAD bound to one key, so the key is set up once per
   * direction rather than once per record. Without it, `CipherState` seals and opens with
   * `encrypt`/`decrypt`. Both must produce the same bytes.
   */
  keyedAead?(cipher: CipherName, key: Uint8Array): KeyedAead;
  /**
   * Optional: an AEAD bound to one key that answers later (the browser's WebCrypto, native code behind a
   * promise), or null for a cipher it cannot do. A transport then seals or opens several records at once and
   * takes the results in order (`Transport.encryptAsync`, `decryptAsync`). Same bytes as `encrypt`/`decrypt`.
   */
  asyncAead?(cipher: CipherName, key: Uint8Array): AsyncAead | null;
  /** SHA-256 over the concatenation of `parts`. */
  hash(parts: readonly Uint8Array[]): Uint8Array;
  /** HMAC-SHA256(key, concatenation of `parts`). */
  hmac(key: Uint8Array, parts: readonly Uint8Array[]): Uint8Array;
  randomBytes(length: number): Uint8Array;
}

/** An AEAD bound to one key (see `CryptoProvider.keyedAead`). */
export interface KeyedAead {
  /**
   * Seals the concatenation of `parts` (so a caller need not join them first) and writes
   * ciphertext ‖ 16-byte tag into `out`, which must be exactly that long.
   */
  sealInto(nonce: Uint8Array, ad: Uint8Array, parts: readonly Uint8Array[], out: Uint8Array): void;
  /** AEAD open: returns a fresh plaintext buffer; throws on authentication failure. */
  open(nonce: Uint8Array, ad: Uint8Array, ciphertext: Uint8Array): Uint8Array;
  /**
   * AEAD open into `out` (exactly `ciphertext.length - 16` bytes; it may be the ciphertext's own first
   * bytes, in place); throws on authentication failure, and `out` then holds garbage.
   */
  openInto(nonce: Uint8Array, ad: Uint8Array, ciphertext: Uint8Array, out: Uint8Array): void;
}

/** A `KeyedAead` over a provider's one-shot `encrypt`/`decrypt` (for providers without `keyedAead`). */
export function oneShotAead(provider: CryptoProvider, cipher: CipherName, key: Uint8Array): KeyedAead {
  const k = Uint8Array.from(key);
  return {
    sealInto(nonce, ad, parts, out) {
      const sealed = provider.encrypt(cipher, k, nonce, ad, parts.length === 1 ? parts[0]! : concatBytes(parts));
      if (sealed.length !== out.length) throw new RangeError('output buffer has the wrong length');
      out.set(sealed);
    },
    open(nonce, ad, ciphertext) {
      return provider.decrypt(cipher, k, nonce, ad, ciphertext);
    },
    openInto(nonce, ad, ciphertext, out) {
      if (out.length !== ciphertext.length - TAG_LENGTH_BYTES)
        throw new RangeError('output buffer has the wrong length');
      out.set(provider.decrypt(cipher, k, nonce, ad, ciphertext));
    },
  };
}

/** An AEAD bound to one key that answers asynchronously (see `CryptoProvider.asyncAead`). */
export interface AsyncAead {
  /**
   * AEAD seal: ciphertext ‖ 16-byte tag. `nonce`, `ad` and `plaintext` may change once this returns: take
   * copies first, as WebCrypto's `encrypt` does of its arguments when called.
   */
  seal(nonce: Uint8Array, ad: Uint8Array, plaintext: Uint8Array): Promise<Uint8Array>;
  /**
   * AEAD open: a fresh plaintext; rejects on authentication failure. `nonce`, `ad` and `ciphertext` may change
   * once this returns (a relay link's payload is valid only while its frame is handled): take copies first,
   * as WebCrypto's `decrypt` does of its arguments when called.
   */
  open(nonce: Uint8Array, ad: Uint8Array, ciphertext: Uint8Array): Promise<Uint8Array>;
}

/** Options shared by the provider and KEM factories: inject randomness for deterministic tests. */
export interface RandomOptions {
  randomBytes?: (length: number) => Uint8Array;
}

export interface KemEncapsulation {
  readonly ciphertext: Uint8Array;
  readonly sharedSecret: Uint8Array;
}

export interface KemEphemeral {
  readonly publicKey: Uint8Array;
  decapsulate(ciphertext: Uint8Array): Uint8Array;
}

/** A static KEM key pair: its bytes, and decapsulation by the backend that made it. */
export interface KemKeyPair extends KeyPair, KemEphemeral {}

/**
 * A KEM cannot hide behind dh(): encapsulation and decapsulation are asymmetric.
 * ML-KEM decapsulation never fails on a well-sized ciphertext (implicit rejection): a wrong key or a
 * tampered ciphertext yields a different shared secret, so the failure surfaces as an AEAD error later.
 */
export interface Kem {
  readonly name: string;
  readonly publicKeyLength: number;
  readonly secretKeyLength: number;
  readonly ciphertextLength: number;
  readonly sharedSecretLength: number;
  /**
   * A key pair to keep (a static identity). `secretKey` is its byte form (for an identity file); a backend
   * may compute it only when read and decapsulate through `decapsulate` without it.
   */
  generateKeyPair(): KemKeyPair;
  /** A key pair for one handshake: the secret may stay inside the backend (an OpenSSL key, say). */
  generateEphemeral(): KemEphemeral;
  encapsulate(publicKey: Uint8Array): KemEncapsulation;
  decapsulate(ciphertext: Uint8Array, secretKey: Uint8Array): Uint8Array;
}

/** Noise spec §4.3 HKDF with HMAC-SHA256: salt = chaining key, info empty, 2 or 3 outputs of HASHLEN. */
export function hkdf(
  provider: CryptoProvider,
  chainingKey: Uint8Array,
  inputKeyMaterial: Uint8Array,
  outputs: 2 | 3,
): Uint8Array[] {
  const tempKey = provider.hmac(chainingKey, [inputKeyMaterial]);
  const output1 = provider.hmac(tempKey, [Uint8Array.of(0x01)]);
  const output2 = provider.hmac(tempKey, [output1, Uint8Array.of(0x02)]);
  if (outputs === 2) return [output1, output2];
  const output3 = provider.hmac(tempKey, [output2, Uint8Array.of(0x03)]);
  return [output1, output2, output3];
}

export function concatBytes(parts: readonly Uint8Array[]): Uint8Array {
  let length = 0;
  for (const part of parts) length += part.length;
  const out = new Uint8Array(length);
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

export function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

export function isAllZero(bytes: Uint8Array): boolean {
  let acc = 0;
  for (const byte of bytes) acc |= byte;
  return acc === 0;
}
