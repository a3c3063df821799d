import { randomBytes as nobleRandomBytes } from '@noble/hashes/utils.js';
import { ml_kem768 } from '@noble/post-quantum/ml-kem.js';
import type { Kem, KemEncapsulation, KeyPair, RandomOptions } from '../crypto.js';

/** FIPS 203 ML-KEM-768 sizes (rendezvous.md §4.2). */
export const MLKEM768_PUBLIC_KEY_LENGTH = 1184;
export const MLKEM768_SECRET_KEY_LENGTH = 2400;
export const MLKEM768_CIPHERTEXT_LENGTH = 1088;
export const MLKEM768_SHARED_SECRET_LENGTH = 32;
/** keygen consumes d ‖ z (FIPS 203 §7.1), encapsulation one 32-byte message m. */
const KEYGEN_SEED_LENGTH = 64;
const ENCAPSULATION_SEED_LENGTH = 32;
/** The decapsulation key embeds the encapsulation key at this offset (dk = dk_PKE ‖ ek ‖ H(ek) ‖ z). */
const EMBEDDED_PUBLIC_KEY_OFFSET = 1152;

/**
 * ML-KEM-768 over @noble/post-quantum (byte-compatible with RustCrypto ml-kem used by Codex).
 * Node 20 has no native ML-KEM, so the node and portable providers share this KEM.
 */
export function createMlKem768(options: RandomOptions = {}): Kem {
  const randomBytes = options.randomBytes ?? ((length: number) => nobleRandomBytes(length));
  return {
    name: 'MLKEM768',
    publicKeyLength: MLKEM768_PUBLIC_KEY_LENGTH,
    secretKeyLength: MLKEM768_SECRET_KEY_LENGTH,
    ciphertextLength: MLKEM768_CIPHERTEXT_LENGTH,
    sharedSecretLength: MLKEM768_SHARED_SECRET_LENGTH,
    generateKeyPair(): KeyPair {
      const { publicKey, secretKey } = ml_kem768.keygen(randomBytes(KEYGEN_SEED_LENGTH));
      return { publicKey, secretKey };
    },
    encapsulate(publicKey): KemEncapsulation {
      if (publicKey.length !== MLKEM768_PUBLIC_KEY_LENGTH) throw new RangeError('ML-KEM-768 public key length');
      const { cipherText, sharedSecret } = ml_kem768.encapsulate(publicKey, randomBytes(ENCAPSULATION_SEED_LENGTH));
      return { ciphertext: cipherText, sharedSecret };
    },
    decapsulate(ciphertext, secretKey) {
      if (ciphertext.length !== MLKEM768_CIPHERTEXT_LENGTH) throw new RangeError('ML-KEM-768 ciphertext length');
      if (secretKey.length !== MLKEM768_SECRET_KEY_LENGTH) throw new RangeError('ML-KEM-768 secret key length');
      return ml_kem768.decapsulate(ciphertext, secretKey);
    },
  };
}

/** The encapsulation key embedded in an ML-KEM-768 decapsulation key (used to check identity files). */
export function mlKem768PublicKeyOf(secretKey: Uint8Array): Uint8Array {
  return secretKey.subarray(EMBEDDED_PUBLIC_KEY_OFFSET, EMBEDDED_PUBLIC_KEY_OFFSET + MLKEM768_PUBLIC_KEY_LENGTH);
}
