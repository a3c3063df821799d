import type { KeyObject } from 'node:crypto';
import * as nodeCrypto from 'node:crypto';
import { randomBytes as nobleRandomBytes } from '@noble/hashes/utils.js';
import { ml_kem768 } from '@noble/post-quantum/ml-kem.js';
import type { Kem, KemEncapsulation, KemEphemeral, KeyPair, RandomOptions } from '../crypto.js';

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
  const generateKeyPair = (): KeyPair => {
    const { publicKey, secretKey } = ml_kem768.keygen(randomBytes(KEYGEN_SEED_LENGTH));
    return { publicKey, secretKey };
  };
  const decapsulate = (ciphertext: Uint8Array, secretKey: Uint8Array): Uint8Array => {
    checkLength('ciphertext', ciphertext, MLKEM768_CIPHERTEXT_LENGTH);
    checkLength('secret key', secretKey, MLKEM768_SECRET_KEY_LENGTH);
    return ml_kem768.decapsulate(ciphertext, secretKey);
  };
  return {
    ...SIZES,
    generateKeyPair,
    generateEphemeral(): KemEphemeral {
      const { publicKey, secretKey } = generateKeyPair();
      return { publicKey, decapsulate: (ciphertext) => decapsulate(ciphertext, secretKey) };
    },
    encapsulate(publicKey): KemEncapsulation {
      checkLength('public key', publicKey, MLKEM768_PUBLIC_KEY_LENGTH);
      const { cipherText, sharedSecret } = ml_kem768.encapsulate(publicKey, randomBytes(ENCAPSULATION_SEED_LENGTH));
      return { ciphertext: cipherText, sharedSecret };
    },
    decapsulate,
  };
}

const SIZES = {
  name: 'MLKEM768',
  publicKeyLength: MLKEM768_PUBLIC_KEY_LENGTH,
  secretKeyLength: MLKEM768_SECRET_KEY_LENGTH,
  ciphertextLength: MLKEM768_CIPHERTEXT_LENGTH,
  sharedSecretLength: MLKEM768_SHARED_SECRET_LENGTH,
} as const;

function checkLength(what: string, bytes: Uint8Array, length: number): void {
  if (bytes.length !== length) throw new RangeError(`ML-KEM-768 ${what} length`);
}

/** Node 24's KEM functions; @types/node for Node 20 does not declare them. */
interface NodeKemApi {
  encapsulate(key: KeyObject): { sharedKey: Buffer; ciphertext: Buffer };
  decapsulate(key: KeyObject, ciphertext: Uint8Array): Buffer;
}

/**
 * PKCS#8 for an ML-KEM-768 private key in its `expandedKey` form (draft-ietf-lamps-kyber-certificates:
 * the 2400-byte decapsulation key as an OCTET STRING inside the privateKey OCTET STRING). OpenSSL checks
 * the embedded H(ek) on import. A DER prefix, then the key.
 */
const PKCS8_EXPANDED_PREFIX = Buffer.from(
  '3082097802010030' + '0b0609608648016503040402' + '04820964' + '04820960',
  'hex',
);

let nodeKem: Kem | null | undefined;

/**
 * The `node` backend, made once; null when this Node lacks ML-KEM (Node 20 and 22: OpenSSL 3.0) or when a
 * probe round trip against noble fails (then noble serves, never a silent change of the wire bytes).
 */
function nodeMlKem(): Kem | null {
  if (nodeKem !== undefined) return nodeKem;
  nodeKem = null;
  const api = nodeCrypto as unknown as Partial<NodeKemApi>;
  if (typeof api.encapsulate !== 'function' || typeof api.decapsulate !== 'function') return null;
  const { encapsulate, decapsulate } = api as NodeKemApi;
  const bytes = (b: Buffer) => new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  const importedSecrets = new WeakMap<Uint8Array, KeyObject>();
  const secretKeyObject = (secretKey: Uint8Array): KeyObject => {
    let key = importedSecrets.get(secretKey);
    if (!key) {
      checkLength('secret key', secretKey, MLKEM768_SECRET_KEY_LENGTH);
      const der = Buffer.concat([PKCS8_EXPANDED_PREFIX, secretKey]);
      key = nodeCrypto.createPrivateKey({ key: der, format: 'der', type: 'pkcs8' });
      importedSecrets.set(secretKey, key);
    }
    return key;
  };
  const noble = createNobleMlKem768({});
  const kem: Kem = {
    ...SIZES,
    // A static key pair must keep its 2400-byte secret (identity files), which Node cannot export (it
    // exports the seed): noble expands it. Key pairs are made once per identity, not per handshake.
    generateKeyPair: () => noble.generateKeyPair(),
    generateEphemeral(): KemEphemeral {
      const { publicKey, privateKey } = nodeCrypto.generateKeyPairSync('ml-kem-768' as never);
      return {
        publicKey: bytes(publicKey.export({ format: 'raw-public' } as never) as Buffer),
        decapsulate(ciphertext) {
          checkLength('ciphertext', ciphertext, MLKEM768_CIPHERTEXT_LENGTH);
          return bytes(decapsulate(privateKey, ciphertext));
        },
      };
    },
    encapsulate(publicKey): KemEncapsulation {
      checkLength('public key', publicKey, MLKEM768_PUBLIC_KEY_LENGTH);
      const key = nodeCrypto.createPublicKey({
        key: Buffer.from(publicKey.buffer, publicKey.byteOffset, publicKey.byteLength),
        format: 'raw-public',
        asymmetricKeyType: 'ml-kem-768',
      } as never);
      const { sharedKey, ciphertext } = encapsulate(key);
      return { ciphertext: bytes(ciphertext), sharedSecret: bytes(sharedKey) };
    },
    decapsulate(ciphertext, secretKey) {
      checkLength('ciphertext', ciphertext, MLKEM768_CIPHERTEXT_LENGTH);
      return bytes(decapsulate(secretKeyObject(secretKey), ciphertext));
    },
  };
  try {
    // Both directions and both key forms, against noble: the wire bytes must not depend on the backend.
    const pair = noble.generateKeyPair();
    const toNode = noble.encapsulate(pair.publicKey);
    const ephemeral = kem.generateEphemeral();
    const toNoble = kem.encapsulate(pair.publicKey);
    const fromNoble = noble.encapsulate(ephemeral.publicKey);
    if (
      equal(kem.decapsulate(toNode.ciphertext, pair.secretKey), toNode.sharedSecret) &&
      equal(noble.decapsulate(toNoble.ciphertext, pair.secretKey), toNoble.sharedSecret) &&
      equal(ephemeral.decapsulate(fromNoble.ciphertext), fromNoble.sharedSecret)
    ) {
      nodeKem = kem;
    }
  } catch {
    // ML-KEM present but not as expected (another OpenSSL): noble serves.
  }
  return nodeKem;
}

function equal(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && nodeCrypto.timingSafeEqual(a, b);
}

/** The encapsulation key embedded in an ML-KEM-768 decapsulation key (used to check identity files). */
export function mlKem768PublicKeyOf(secretKey: Uint8Array): Uint8Array {
  return secretKey.subarray(EMBEDDED_PUBLIC_KEY_OFFSET, EMBEDDED_PUBLIC_KEY_OFFSET + MLKEM768_PUBLIC_KEY_LENGTH);
}
