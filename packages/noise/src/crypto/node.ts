import {
  createCipheriv,
  createDecipheriv,
  createHash,
  createHmac,
  createPrivateKey,
  createPublicKey,
  createSecretKey,
  diffieHellman,
  type KeyObject,
  randomBytes as nodeRandomBytes,
} from 'node:crypto';
import {
  loadNativeCrypto,
  type NativeAeadKey,
  type NativeAeadOpenKey,
  nativeCryptoUnavailableReason,
} from '@tether/native-crypto';
import {
  type CipherName,
  type CryptoProvider,
  isAllZero,
  type KeyedAead,
  type KeyPair,
  type RandomOptions,
  TAG_LENGTH_BYTES,
  X25519_KEY_LENGTH,
} from '../crypto.js';

const TAG = { authTagLength: TAG_LENGTH_BYTES } as const;

function cipherFor(cipher: CipherName, key: Uint8Array | KeyObject, nonce: Uint8Array) {
  return cipher === 'AESGCM'
    ? createCipheriv('aes-256-gcm', key, nonce, TAG)
    : createCipheriv('chacha20-poly1305', key, nonce, TAG);
}

function decipherFor(cipher: CipherName, key: Uint8Array | KeyObject, nonce: Uint8Array) {
  return cipher === 'AESGCM'
    ? createDecipheriv('aes-256-gcm', key, nonce, TAG)
    : createDecipheriv('chacha20-poly1305', key, nonce, TAG);
}

/** Which implementation seals and opens transport records. */
export type AeadBackend = 'native' | 'node';

/**
 * A transport AEAD bound to one key. `native` (@tether/native-crypto, the default when its addon is built)
 * seals straight into the caller's buffer and opens into one, with the key schedule set up once per
 * direction. `node` (node:crypto) imports the key once as a KeyObject but needs a `createCipheriv` per
 * record (node cannot reset a cipher's nonce), and each `update` returns a fresh zero-filled buffer.
 */
function keyedAead(cipher: CipherName, key: Uint8Array, backend: AeadBackend): KeyedAead {
  if (backend === 'native') {
    const native = loadNativeCrypto();
    if (!native) throw new Error(`the native AEAD is not available: ${nativeCryptoUnavailableReason()}`);
    // A context per direction of use, made on first use (a CipherState seals or opens, never both).
    let sealing: NativeAeadKey | null = null;
    let opening: NativeAeadOpenKey | null = null;
    const openInto = (nonce: Uint8Array, ad: Uint8Array, ciphertext: Uint8Array, out: Uint8Array): void => {
      if (ciphertext.length < TAG_LENGTH_BYTES) throw new Error('ciphertext shorter than the tag');
      if (out.length !== ciphertext.length - TAG_LENGTH_BYTES)
        throw new RangeError('output buffer has the wrong length');
      opening ??= native.openingKey(cipher, key);
      if (!opening.open(nonce, ad, ciphertext, out)) throw new Error('authentication failed');
    };
    return {
      sealInto(nonce, ad, parts, out) {
        let length = TAG_LENGTH_BYTES;
        for (const part of parts) length += part.length;
        if (length !== out.length) throw new RangeError('output buffer has the wrong length');
        sealing ??= native.sealingKey(cipher, key);
        sealing.seal(nonce, ad, parts, out);
      },
      open(nonce, ad, ciphertext) {
        // Uninitialised memory: every byte is written, or the buffer is dropped with the error.
        const out = toBytes(Buffer.allocUnsafe(Math.max(0, ciphertext.length - TAG_LENGTH_BYTES)));
        openInto(nonce, ad, ciphertext, out);
        return out;
      },
      openInto,
    };
  }
  const keyObject = createSecretKey(key);
  const open = (nonce: Uint8Array, ad: Uint8Array, ciphertext: Uint8Array): Uint8Array => {
    if (ciphertext.length < TAG_LENGTH_BYTES) throw new Error('ciphertext shorter than the tag');
    const bodyLength = ciphertext.length - TAG_LENGTH_BYTES;
    const d = decipherFor(cipher, keyObject, nonce);
    if (ad.length > 0) d.setAAD(ad);
    d.setAuthTag(ciphertext.subarray(bodyLength));
    const head = d.update(ciphertext.subarray(0, bodyLength));
    const tail = d.final();
    if (tail.length === 0) return toBytes(head);
    return toBytes(Buffer.concat([head, tail]));
  };
  return {
    sealInto(nonce, ad, parts, out) {
      let length = TAG_LENGTH_BYTES;
      for (const part of parts) length += part.length;
      if (length !== out.length) throw new RangeError('output buffer has the wrong length');
      const c = cipherFor(cipher, keyObject, nonce);
      if (ad.length > 0) c.setAAD(ad);
      let at = 0;
      for (const part of parts) {
        const chunk = c.update(part);
        out.set(chunk, at);
        at += chunk.length;
      }
      const tail = c.final();
      out.set(tail, at);
      out.set(c.getAuthTag(), at + tail.length);
    },
    open,
    openInto(nonce, ad, ciphertext, out) {
      if (out.length !== ciphertext.length - TAG_LENGTH_BYTES)
        throw new RangeError('output buffer has the wrong length');
      out.set(open(nonce, ad, ciphertext));
    },
  };
}

/**
 * KeyObjects for raw X25519 keys, cached by the key's own Uint8Array (static keys are imported once; an
 * ephemeral key serves two DHs). A private key is imported the cheapest way this Node offers, found once by
 * a probe that checks the derived public key against RFC 7748's test vector:
 * - `raw-private` (Node 24: the public raw format, about 0.03 ms);
 * - a JWK with a placeholder `x` (Node 20 and 22 check only that `x` is a string and derive the public key
 *   from `d`; PKCS#8 import costs 0.4 ms on Node 20 against 0.04 ms for this);
 * - PKCS#8 DER (always correct; the fallback if a Node rejects both).
 */
type PrivateKeyImport = 'raw-private' | 'jwk' | 'pkcs8';
const PLACEHOLDER_X = 'A'.repeat(43);
const PKCS8_X25519_PREFIX = Buffer.from('302e020100300506032b656e04220420', 'hex');
const privateKeyObjects = new WeakMap<Uint8Array, KeyObject>();
const publicKeyObjects = new WeakMap<Uint8Array, KeyObject>();

function checkLength(key: Uint8Array): void {
  if (key.length !== X25519_KEY_LENGTH) throw new RangeError(`X25519 keys are ${X25519_KEY_LENGTH} bytes`);
}

function importPrivateKey(secretKey: Uint8Array, how: PrivateKeyImport): KeyObject {
  const raw = Buffer.from(secretKey.buffer, secretKey.byteOffset, secretKey.byteLength);
  switch (how) {
    case 'raw-private':
      // Node 24's raw key formats; @types/node for Node 20 does not know them.
      return createPrivateKey({ key: raw, format: 'raw-private', asymmetricKeyType: 'x25519' } as never);
    case 'jwk':
      return createPrivateKey({
        key: { kty: 'OKP', crv: 'X25519', d: raw.toString('base64url'), x: PLACEHOLDER_X },
        format: 'jwk',
      });
    case 'pkcs8':
      return createPrivateKey({ key: Buffer.concat([PKCS8_X25519_PREFIX, raw]), format: 'der', type: 'pkcs8' });
  }
}

/** RFC 7748 §6.1: Alice's private key and the public key it must derive. */
const VECTOR_SECRET = Buffer.from('77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a', 'hex');
const VECTOR_PUBLIC = '8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a';

/** The first import method that works on this Node and derives the right public key. */
export function probePrivateKeyImport(): PrivateKeyImport {
  for (const how of ['raw-private', 'jwk'] as const) {
    try {
      const key = importPrivateKey(toBytes(VECTOR_SECRET), how);
      const x = createPublicKey(key).export({ format: 'jwk' }).x;
      if (Buffer.from(x ?? '', 'base64url').toString('hex') === VECTOR_PUBLIC) return how;
    } catch {
      // Not on this Node: try the next.
    }
  }
  return 'pkcs8';
}

let privateKeyImport: PrivateKeyImport | undefined;

function privateKeyObject(secretKey: Uint8Array): KeyObject {
  let key = privateKeyObjects.get(secretKey);
  if (!key) {
    checkLength(secretKey);
    privateKeyImport ??= probePrivateKeyImport();
    key = importPrivateKey(secretKey, privateKeyImport);
    privateKeyObjects.set(secretKey, key);
  }
  return key;
}

function publicKeyObject(publicKey: Uint8Array): KeyObject {
  let key = publicKeyObjects.get(publicKey);
  if (!key) {
    checkLength(publicKey);
    const x = Buffer.from(publicKey.buffer, publicKey.byteOffset, publicKey.byteLength).toString('base64url');
    key = createPublicKey({ key: { kty: 'OKP', crv: 'X25519', x }, format: 'jwk' });
    publicKeyObjects.set(publicKey, key);
  }
  return key;
}

function rawFromJwk(value: string | undefined): Uint8Array {
  return toBytes(Buffer.from(value ?? '', 'base64url'));
}

function toBytes(buffer: Buffer): Uint8Array {
  return new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength);
}

export interface NodeProviderOptions extends RandomOptions {
  /** Transport records: `native` when the addon is built (the default then), else `node`. */
  aead?: AeadBackend;
}

/**
 * Provider on node:crypto (OpenSSL): native X25519, AES-256-GCM, ChaCha20-Poly1305, SHA-256; transport
 * records through @tether/native-crypto (the same OpenSSL, in place) when its addon is built.
 */
export function createNodeProvider(options: NodeProviderOptions = {}): CryptoProvider {
  const aead: AeadBackend = options.aead ?? (loadNativeCrypto() ? 'native' : 'node');
  const randomBytes = options.randomBytes ?? ((length: number) => toBytes(nodeRandomBytes(length)));

  const publicKeyFromSecret = (secretKey: Uint8Array): Uint8Array =>
    rawFromJwk(createPublicKey(privateKeyObject(secretKey)).export({ format: 'jwk' }).x);

  return {
    name: 'node',
    generateKeyPair(): KeyPair {
      // Any 32 random bytes are an X25519 secret (RFC 7748 §5: the DH clamps them). Not generateKeyPairSync:
      // on Node 20 exporting the key it made can deadlock the process for good. The export holds the key's
      // mutex while it allocates; a GC then may finalize the spent key-generation job, whose destructor
      // takes the same mutex (seen in CI: a vitest worker stuck in futex_wait under
      // KeyGenJob::~KeyGenJob inside KeyObjectHandle::ExportJWK).
      const secretKey = randomBytes(X25519_KEY_LENGTH);
      return { secretKey, publicKey: publicKeyFromSecret(secretKey) };
    },
    publicKeyFromSecret,
    dh(secretKey, publicKey) {
      const shared = diffieHellman({ privateKey: privateKeyObject(secretKey), publicKey: publicKeyObject(publicKey) });
      // OpenSSL already refuses an all-zero result; keep the check explicit so both providers agree.
      if (isAllZero(shared)) throw new Error('X25519 produced an all-zero shared secret');
      return toBytes(shared);
    },
    encrypt(cipher, key, nonce, ad, plaintext) {
      const c = cipherFor(cipher, key, nonce);
      c.setAAD(ad);
      const head = c.update(plaintext);
      const tail = c.final();
      const out = new Uint8Array(head.length + tail.length + TAG_LENGTH_BYTES);
      out.set(head, 0);
      out.set(tail, head.length);
      out.set(c.getAuthTag(), head.length + tail.length);
      return out;
    },
    decrypt(cipher, key, nonce, ad, ciphertext) {
      if (ciphertext.length < TAG_LENGTH_BYTES) throw new Error('ciphertext shorter than the tag');
      const bodyLength = ciphertext.length - TAG_LENGTH_BYTES;
      const d = decipherFor(cipher, key, nonce);
      d.setAAD(ad);
      d.setAuthTag(ciphertext.subarray(bodyLength));
      const head = d.update(ciphertext.subarray(0, bodyLength));
      const tail = d.final();
      if (tail.length === 0) return toBytes(head);
      return toBytes(Buffer.concat([head, tail]));
    },
    keyedAead: (cipher, key) => keyedAead(cipher, key, aead),
    hash(parts) {
      const h = createHash('sha256');
      for (const part of parts) h.update(part);
      return toBytes(h.digest());
    },
    hmac(key, parts) {
      const h = createHmac('sha256', key);
      for (const part of parts) h.update(part);
      return toBytes(h.digest());
    },
    randomBytes,
  };
}
