import { randomBytes as nobleRandomBytes } from '@noble/hashes/utils.js';
import { ml_kem768 } from '@noble/post-quantum/ml-kem.js';
import { nativeMlKem as nodeMlKem } from '#platform';
import type { Kem, KemEncapsulation, KemKeyPair, RandomOptions } from '../crypto.js';
import {
  checkLength,
  KEYGEN_SEED_LENGTH,
  MLKEM768_CIPHERTEXT_LENGTH,
  MLKEM768_PUBLIC_KEY_LENGTH,
  MLKEM768_SECRET_KEY_LENGTH,
  SIZES,
} from './sizes.js';

export {
  MLKEM768_CIPHERTEXT_LENGTH,
  MLKEM768_PUBLIC_KEY_LENGTH,
  MLKEM768_SECRET_KEY_LENGTH,
  MLKEM768_SHARED_SECRET_LENGTH,
} from './sizes.js';

/** Encapsulation consumes one 32-byte message m (FIPS 203 §7.2). */
const ENCAPSULATION_SEED_LENGTH = 32;
/** The decapsulation key embeds the encapsulation key at this offset (dk = dk_PKE ‖ ek ‖ H(ek) ‖ z). */
const EMBEDDED_PUBLIC_KEY_OFFSET = 1152;

export type MlKemBackend = 'node' | 'noble';

export interface MlKemOptions extends RandomOptions {
  /**
   * `node`: ML-KEM-768 of `node:crypto` (OpenSSL 3.5, Node 24 and later; about 15× faster than noble, the
   * OS's randomness only). `noble`: @noble/post-quantum, pure JS, the portable fallback; takes injected
   * randomness (deterministic tests). Default: noble when `randomBytes` is injected, else node where this
   * Node has it, else noble.
   */
  backend?: MlKemBackend;
}

/**
 * ML-KEM-768 (FIPS 203), byte-compatible with RustCrypto ml-kem used by Codex, whichever backend runs
 * it (tests cross-check them). Secret keys are the 2400-byte expanded decapsulation key on both backends.
 */
export function createMlKem768(options: MlKemOptions = {}): Kem {
  const backend = options.backend ?? (options.randomBytes === undefined && nodeMlKem() ? 'node' : 'noble');
  if (backend === 'node') {
    const kem = nodeMlKem();
    if (!kem) throw new Error(`this Node (${process.version}) has no ML-KEM-768 in node:crypto (Node 24 has)`);
    if (options.randomBytes) throw new Error('the node ML-KEM backend cannot take injected randomness');
    return kem;
  }
  return createNobleMlKem768(options);
}

/** Which backend `createMlKem768()` picks by default on this Node. */
export function defaultMlKemBackend(): MlKemBackend {
  return nodeMlKem() ? 'node' : 'noble';
}

function createNobleMlKem768(options: RandomOptions): Kem {
  const randomBytes = options.randomBytes ?? ((length: number) => nobleRandomBytes(length));
  const decapsulate = (ciphertext: Uint8Array, secretKey: Uint8Array): Uint8Array => {
    checkLength('ciphertext', ciphertext, MLKEM768_CIPHERTEXT_LENGTH);
    checkLength('secret key', secretKey, MLKEM768_SECRET_KEY_LENGTH);
    return ml_kem768.decapsulate(ciphertext, secretKey);
  };
  const generateKeyPair = (): KemKeyPair => {
    const { publicKey, secretKey } = ml_kem768.keygen(randomBytes(KEYGEN_SEED_LENGTH));
    return { publicKey, secretKey, decapsulate: (ciphertext) => decapsulate(ciphertext, secretKey) };
  };
  return {
    ...SIZES,
    generateKeyPair,
    generateEphemeral: generateKeyPair,
    encapsulate(publicKey): KemEncapsulation {
      checkLength('public key', publicKey, MLKEM768_PUBLIC_KEY_LENGTH);
      const { cipherText, sharedSecret } = ml_kem768.encapsulate(publicKey, randomBytes(ENCAPSULATION_SEED_LENGTH));
      return { ciphertext: cipherText, sharedSecret };
    },
    decapsulate,
  };
}

/** The encapsulation key embedded in an ML-KEM-768 decapsulation key (used to check identity files). */
export function mlKem768PublicKeyOf(secretKey: Uint8Array): Uint8Array {
  return secretKey.subarray(EMBEDDED_PUBLIC_KEY_OFFSET, EMBEDDED_PUBLIC_KEY_OFFSET + MLKEM768_PUBLIC_KEY_LENGTH);
}
