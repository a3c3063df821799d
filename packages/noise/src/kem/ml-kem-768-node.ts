/**
 * ML-KEM-768 of `node:crypto` (OpenSSL 3.5, Node 24 and later): the `node` backend of `createMlKem768`,
 * reached through `#platform` so that a browser build never loads node:crypto.
 */
import type { KeyObject } from 'node:crypto';
import * as nodeCrypto from 'node:crypto';
import { ml_kem768 } from '@noble/post-quantum/ml-kem.js';
import type { Kem, KemEncapsulation, KemEphemeral, KemKeyPair } from '../crypto.js';
import {
  checkLength,
  KEYGEN_SEED_LENGTH,
  MLKEM768_CIPHERTEXT_LENGTH,
  MLKEM768_PUBLIC_KEY_LENGTH,
  MLKEM768_SECRET_KEY_LENGTH,
  SIZES,
} from './sizes.js';

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

/** SHA-256 of the ML-KEM-768 encapsulation key from the seed 00 01 … 3f (d ‖ z), as @noble/post-quantum makes it. */
const SEED_0_TO_63_EK_SHA256 = '0b7934c83125c788995e2ba6bd761e33046b3e40571be53e023309a29f398cc9';

/**
 * The `node` backend, made once; null when this Node lacks ML-KEM (Node 20 and 22: OpenSSL 3.0) or when a
 * probe round trip against noble fails (then noble serves, never a silent change of the wire bytes).
 */
export function nodeMlKem(): Kem | null {
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
  const decapsulateWith = (privateKey: KeyObject, ciphertext: Uint8Array): Uint8Array => {
    checkLength('ciphertext', ciphertext, MLKEM768_CIPHERTEXT_LENGTH);
    return bytes(decapsulate(privateKey, ciphertext));
  };
  // A key from 64 random bytes (d ‖ z, FIPS 203 §7.1) imported as a seed, not generateKeyPairSync: no key
  // generation job whose export could deadlock with its finalizer (as on Node 20, crypto/node.ts), and the
  // seed is at hand for the 2400-byte form.
  const seededKey = () => {
    const seed = bytes(nodeCrypto.randomBytes(KEYGEN_SEED_LENGTH));
    const privateKey = nodeCrypto.createPrivateKey({
      key: Buffer.from(seed.buffer, seed.byteOffset, seed.byteLength),
      format: 'raw-seed',
      asymmetricKeyType: 'ml-kem-768',
    } as never);
    const publicKey = bytes(nodeCrypto.createPublicKey(privateKey).export({ format: 'raw-public' } as never) as Buffer);
    return { seed, privateKey, publicKey };
  };
  const kem: Kem = {
    ...SIZES,
    // A static pair keeps its key in OpenSSL too. Its 2400-byte form (for an identity file) is expanded from
    // the seed by noble only when read: Node exports a key's seed, not that form, and noble's first keygen in
    // a fresh process costs about 20 ms of a command's start.
    generateKeyPair(): KemKeyPair {
      const { seed, privateKey, publicKey } = seededKey();
      let expanded: Uint8Array | undefined;
      return {
        publicKey,
        get secretKey(): Uint8Array {
          if (!expanded) {
            expanded = ml_kem768.keygen(seed).secretKey;
            importedSecrets.set(expanded, privateKey);
          }
          return expanded;
        },
        decapsulate: (ciphertext) => decapsulateWith(privateKey, ciphertext),
      };
    },
    generateEphemeral(): KemEphemeral {
      const { privateKey, publicKey } = seededKey();
      return { publicKey, decapsulate: (ciphertext) => decapsulateWith(privateKey, ciphertext) };
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
    // A known answer and a round trip, without noble (whose first use costs a command's start ~20 ms):
    // FIPS 203 key generation from a fixed seed must give the encapsulation key noble gives (its SHA-256
    // below), and what node encapsulates to it must decapsulate to the same secret. Ciphertexts and keys
    // crossing between the backends are checked against noble in the tests.
    const seeded = nodeCrypto.createPrivateKey({
      key: Buffer.from(Uint8Array.from({ length: KEYGEN_SEED_LENGTH }, (_, i) => i)),
      format: 'raw-seed',
      asymmetricKeyType: 'ml-kem-768',
    } as never);
    const encapsulationKey = nodeCrypto.createPublicKey(seeded).export({ format: 'raw-public' } as never) as Buffer;
    const digest = nodeCrypto.createHash('sha256').update(encapsulationKey).digest('hex');
    const sent = kem.encapsulate(bytes(encapsulationKey));
    if (digest === SEED_0_TO_63_EK_SHA256 && equal(bytes(decapsulate(seeded, sent.ciphertext)), sent.sharedSecret)) {
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
