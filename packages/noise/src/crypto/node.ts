import {
  createCipheriv,
  createDecipheriv,
  createHash,
  createHmac,
  createPrivateKey,
  createPublicKey,
  diffieHellman,
  randomBytes as nodeRandomBytes,
} from 'node:crypto';
import {
  type CipherName,
  type CryptoProvider,
  isAllZero,
  type KeyPair,
  type RandomOptions,
  TAG_LENGTH_BYTES,
  X25519_KEY_LENGTH,
} from '../crypto.js';

// DER wrappers for raw X25519 keys (RFC 8410): PKCS#8 private key and SubjectPublicKeyInfo.
const PKCS8_X25519_PREFIX = Uint8Array.from([
  0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x6e, 0x04, 0x22, 0x04, 0x20,
]);
const SPKI_X25519_PREFIX = Uint8Array.from([0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x6e, 0x03, 0x21, 0x00]);

const TAG = { authTagLength: TAG_LENGTH_BYTES } as const;

function cipherFor(cipher: CipherName, key: Uint8Array, nonce: Uint8Array) {
  return cipher === 'AESGCM'
    ? createCipheriv('aes-256-gcm', key, nonce, TAG)
    : createCipheriv('chacha20-poly1305', key, nonce, TAG);
}

function decipherFor(cipher: CipherName, key: Uint8Array, nonce: Uint8Array) {
  return cipher === 'AESGCM'
    ? createDecipheriv('aes-256-gcm', key, nonce, TAG)
    : createDecipheriv('chacha20-poly1305', key, nonce, TAG);
}

function withPrefix(prefix: Uint8Array, key: Uint8Array): Buffer {
  if (key.length !== X25519_KEY_LENGTH) throw new RangeError(`X25519 keys are ${X25519_KEY_LENGTH} bytes`);
  const der = Buffer.allocUnsafe(prefix.length + key.length);
  der.set(prefix, 0);
  der.set(key, prefix.length);
  return der;
}

function privateKeyObject(secretKey: Uint8Array) {
  return createPrivateKey({ key: withPrefix(PKCS8_X25519_PREFIX, secretKey), format: 'der', type: 'pkcs8' });
}

function toBytes(buffer: Buffer): Uint8Array {
  return new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength);
}

/** Provider on node:crypto (OpenSSL): native X25519, AES-256-GCM, ChaCha20-Poly1305, SHA-256. */
export function createNodeProvider(options: RandomOptions = {}): CryptoProvider {
  const randomBytes = options.randomBytes ?? ((length: number) => toBytes(nodeRandomBytes(length)));

  const publicKeyFromSecret = (secretKey: Uint8Array): Uint8Array => {
    const spki = createPublicKey(privateKeyObject(secretKey)).export({ format: 'der', type: 'spki' });
    return toBytes(spki.subarray(spki.length - X25519_KEY_LENGTH));
  };

  return {
    name: 'node',
    generateKeyPair(): KeyPair {
      const secretKey = randomBytes(X25519_KEY_LENGTH);
      return { secretKey, publicKey: publicKeyFromSecret(secretKey) };
    },
    publicKeyFromSecret,
    dh(secretKey, publicKey) {
      const shared = diffieHellman({
        privateKey: privateKeyObject(secretKey),
        publicKey: createPublicKey({ key: withPrefix(SPKI_X25519_PREFIX, publicKey), format: 'der', type: 'spki' }),
      });
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
