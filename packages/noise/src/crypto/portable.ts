import { gcm } from '@noble/ciphers/aes.js';
import { x25519 } from '@noble/curves/ed25519.js';
import { hmac } from '@noble/hashes/hmac.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { randomBytes as nobleRandomBytes } from '@noble/hashes/utils.js';
import { ChaCha20Poly1305 } from '@stablelib/chacha20poly1305';
import { type CryptoProvider, isAllZero, type KeyPair, type RandomOptions, X25519_KEY_LENGTH } from '../crypto.js';

/**
 * Pure-JS provider: @noble/curves (X25519), @noble/hashes (SHA-256, HMAC), @stablelib/chacha20poly1305,
 * @noble/ciphers (AES-256-GCM). Runs anywhere; tests use it to cross-check the node provider byte for byte.
 */
export function createPortableProvider(options: RandomOptions = {}): CryptoProvider {
  const randomBytes = options.randomBytes ?? ((length: number) => nobleRandomBytes(length));
  const publicKeyFromSecret = (secretKey: Uint8Array): Uint8Array => {
    if (secretKey.length !== X25519_KEY_LENGTH) throw new RangeError(`X25519 keys are ${X25519_KEY_LENGTH} bytes`);
    return x25519.getPublicKey(secretKey);
  };

  return {
    name: 'portable',
    generateKeyPair(): KeyPair {
      const secretKey = randomBytes(X25519_KEY_LENGTH);
      return { secretKey, publicKey: publicKeyFromSecret(secretKey) };
    },
    publicKeyFromSecret,
    dh(secretKey, publicKey) {
      // @noble/curves already throws on an all-zero result; the check documents the shared contract.
      const shared = x25519.getSharedSecret(secretKey, publicKey);
      if (isAllZero(shared)) throw new Error('X25519 produced an all-zero shared secret');
      return shared;
    },
    encrypt(cipher, key, nonce, ad, plaintext) {
      if (cipher === 'AESGCM') return gcm(key, nonce, ad).encrypt(plaintext);
      return new ChaCha20Poly1305(key).seal(nonce, plaintext, ad);
    },
    decrypt(cipher, key, nonce, ad, ciphertext) {
      if (cipher === 'AESGCM') return gcm(key, nonce, ad).decrypt(ciphertext);
      const opened = new ChaCha20Poly1305(key).open(nonce, ciphertext, ad);
      if (opened === null) throw new Error('ChaCha20-Poly1305 authentication failed');
      return opened;
    },
    hash(parts) {
      const h = sha256.create();
      for (const part of parts) h.update(part);
      return h.digest();
    },
    hmac(key, parts) {
      const h = hmac.create(sha256, key);
      for (const part of parts) h.update(part);
      return h.digest();
    },
    randomBytes,
  };
}
