import { createRequire } from 'node:module';
import { randomBytes as nobleRandomBytes } from '@noble/hashes/utils.js';
import { ml_kem768 } from '@noble/post-quantum/ml-kem.js';
import type { Kem, KemEncapsulation, KeyPair, RandomOptions } from '../crypto.js';

import {
  MLKEM768_CIPHERTEXT_LENGTH,
  MLKEM768_PUBLIC_KEY_LENGTH,
  MLKEM768_SECRET_KEY_LENGTH,
  MLKEM768_SHARED_SECRET_LENGTH,
} from './sizes.js';

export {
  MLKEM768_CIPHERTEXT_LENGTH,
  MLKEM768_PUBLIC_KEY_LENGTH,
  MLKEM768_SECRET_KEY_LENGTH,
  MLKEM768_SHARED_SECRET_LENGTH,
} from './sizes.js';

/** keygen consumes d ‖ z (FIPS 203 §7.1), encapsulation one 32-byte message m. */
const KEYGEN_SEED_LENGTH = 64;
const ENCAPSULATION_SEED_LENGTH = 32;
/** The decapsulation key embeds the encapsulation key at this offset (dk = dk_PKE ‖ ek ‖ H(ek) ‖ z). */
const EMBEDDED_PUBLIC_KEY_OFFSET = 1152;

export type MlKemBackend = 'native' | 'noble';

export interface MlKemOptions extends RandomOptions {
  /**
   * `native`: PQClean's C implementation through the `pqclean` addon (about 13× faster, the OS's
   * randomness only). `noble`: @noble/post-quantum, pure JS, takes injected randomness (deterministic
   * tests). Default: noble when `randomBytes` is injected, else native when it loads, else noble.
   */
  backend?: MlKemBackend;
}

/**
 * ML-KEM-768 (FIPS 203), byte-compatible with RustCrypto ml-kem used by Codex, whichever backend runs
 * it (tests cross-check them). Node 20 has no ML-KEM in node:crypto.
 */
export function createMlKem768(options: MlKemOptions = {}): Kem {
  const backend = options.backend ?? (options.randomBytes === undefined && loadNative() ? 'native' : 'noble');
  if (backend === 'native') {
    const native = loadNative();
    if (!native) throw new Error('the native ML-KEM backend (pqclean) is not available');
    if (options.randomBytes) throw new Error('the native ML-KEM backend cannot take injected randomness');
    return native;
  }
  return createNobleMlKem768(options);
}

/** Which backend `createMlKem768()` picks by default on this machine. */
export function defaultMlKemBackend(): MlKemBackend {
  return loadNative() ? 'native' : 'noble';
}

function createNobleMlKem768(options: RandomOptions): Kem {
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
      checkLength('public key', publicKey, MLKEM768_PUBLIC_KEY_LENGTH);
      const { cipherText, sharedSecret } = ml_kem768.encapsulate(publicKey, randomBytes(ENCAPSULATION_SEED_LENGTH));
      return { ciphertext: cipherText, sharedSecret };
    },
    decapsulate(ciphertext, secretKey) {
      checkLength('ciphertext', ciphertext, MLKEM768_CIPHERTEXT_LENGTH);
      checkLength('secret key', secretKey, MLKEM768_SECRET_KEY_LENGTH);
      return ml_kem768.decapsulate(ciphertext, secretKey);
    },
  };
}

function checkLength(what: string, bytes: Uint8Array, length: number): void {
  if (bytes.length !== length) throw new RangeError(`ML-KEM-768 ${what} length`);
}

/** The part of the `pqclean` addon's classic API we use (synchronous calls). */
interface PqcleanKem {
  keypair(): { publicKey: Buffer; privateKey: Buffer };
  generateKey(publicKey: Uint8Array): { key: Buffer; encryptedKey: Buffer };
  decryptKey(privateKey: Uint8Array, encryptedKey: Uint8Array): Buffer;
}

let native: Kem | null | undefined;

/** Loads `pqclean` once; null when it is not installed or cannot load (then noble serves). */
function loadNative(): Kem | null {
  if (native !== undefined) return native;
  try {
    const { KEM } = createRequire(import.meta.url)('pqclean') as { KEM: new (name: string) => PqcleanKem };
    const kem = new KEM('ml-kem-768');
    const bytes = (b: Buffer) => new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
    native = {
      name: 'MLKEM768',
      publicKeyLength: MLKEM768_PUBLIC_KEY_LENGTH,
      secretKeyLength: MLKEM768_SECRET_KEY_LENGTH,
      ciphertextLength: MLKEM768_CIPHERTEXT_LENGTH,
      sharedSecretLength: MLKEM768_SHARED_SECRET_LENGTH,
      generateKeyPair(): KeyPair {
        const { publicKey, privateKey } = kem.keypair();
        return { publicKey: bytes(publicKey), secretKey: bytes(privateKey) };
      },
      encapsulate(publicKey): KemEncapsulation {
        checkLength('public key', publicKey, MLKEM768_PUBLIC_KEY_LENGTH);
        const { key, encryptedKey } = kem.generateKey(publicKey);
        return { ciphertext: bytes(encryptedKey), sharedSecret: bytes(key) };
      },
      decapsulate(ciphertext, secretKey) {
        checkLength('ciphertext', ciphertext, MLKEM768_CIPHERTEXT_LENGTH);
        checkLength('secret key', secretKey, MLKEM768_SECRET_KEY_LENGTH);
        return bytes(kem.decryptKey(secretKey, ciphertext));
      },
    };
  } catch {
    native = null;
  }
  return native;
}

/** The encapsulation key embedded in an ML-KEM-768 decapsulation key (used to check identity files). */
export function mlKem768PublicKeyOf(secretKey: Uint8Array): Uint8Array {
  return secretKey.subarray(EMBEDDED_PUBLIC_KEY_OFFSET, EMBEDDED_PUBLIC_KEY_OFFSET + MLKEM768_PUBLIC_KEY_LENGTH);
}
