import type { AsyncAead, CipherName, CryptoProvider } from '../crypto.js';
import { CIPHER_KEY_LENGTH, TAG_LENGTH_BYTES } from '../crypto.js';
import { createPortableProvider } from './portable.js';

/** A WebCrypto key (`CryptoKey`), opaque here: this package is built without the DOM's types. */
type WebCryptoKey = object;

/**
 * The part of WebCrypto's SubtleCrypto this provider uses (the browser's, or Node's `crypto.subtle`). As
 * WebCrypto specifies, `encrypt` and `decrypt` must take copies of their byte arguments when called: the
 * caller reuses them as soon as the call returns (a stand-in that reads them later would seal or open garbage).
 */
export interface AesGcmSubtle {
  importKey(
    format: 'raw',
    keyData: Uint8Array,
    algorithm: { name: 'AES-GCM' },
    extractable: false,
    usages: ['encrypt', 'decrypt'],
  ): Promise<WebCryptoKey>;
  encrypt(
    algorithm: { name: 'AES-GCM'; iv: Uint8Array; additionalData: Uint8Array; tagLength: number },
    key: WebCryptoKey,
    data: Uint8Array,
  ): Promise<ArrayBuffer>;
  decrypt(
    algorithm: { name: 'AES-GCM'; iv: Uint8Array; additionalData: Uint8Array; tagLength: number },
    key: WebCryptoKey,
    data: Uint8Array,
  ): Promise<ArrayBuffer>;
}

export interface WebCryptoProviderOptions {
  /** Everything but the asynchronous AEAD. Default: the portable provider. */
  base?: CryptoProvider;
  /** Default: `globalThis.crypto.subtle`. */
  subtle?: AesGcmSubtle;
}

/**
 * The portable provider plus WebCrypto's native AES-256-GCM for sealing and opening transport records
 * (`asyncAead`): in a browser, JavaScript AES-GCM runs ~45 MB/s, WebCrypto several hundred. WebCrypto has no
 * ChaCha20-Poly1305, so a ChaChaPoly suite keeps its records with the base provider; the handshake stays
 * there as well (it is synchronous in the state machine).
 */
export function createWebCryptoProvider(options: WebCryptoProviderOptions = {}): CryptoProvider {
  const base = options.base ?? createPortableProvider();
  const subtle = options.subtle ?? (globalThis.crypto?.subtle as unknown as AesGcmSubtle | undefined);
  if (subtle === undefined)
    throw new Error('WebCrypto (crypto.subtle) is not available here: a secure context is needed');
  const provider: CryptoProvider = {
    name: `${base.name}+webcrypto`,
    generateKeyPair: () => base.generateKeyPair(),
    publicKeyFromSecret: (secretKey) => base.publicKeyFromSecret(secretKey),
    dh: (secretKey, publicKey) => base.dh(secretKey, publicKey),
    encrypt: (cipher, key, nonce, ad, plaintext) => base.encrypt(cipher, key, nonce, ad, plaintext),
    decrypt: (cipher, key, nonce, ad, ciphertext) => base.decrypt(cipher, key, nonce, ad, ciphertext),
    hash: (parts) => base.hash(parts),
    hmac: (key, parts) => base.hmac(key, parts),
    randomBytes: (length) => base.randomBytes(length),
    asyncAead: (cipher, key) => (cipher === 'AESGCM' ? webCryptoAesGcm(subtle, key) : null),
  };
  if (base.keyedAead) {
    const keyed = base.keyedAead.bind(base);
    provider.keyedAead = (cipher: CipherName, key: Uint8Array) => keyed(cipher, key);
  }
  return provider;
}

function webCryptoAesGcm(subtle: AesGcmSubtle, key: Uint8Array): AsyncAead {
  if (key.length !== CIPHER_KEY_LENGTH) throw new RangeError(`cipher keys are ${CIPHER_KEY_LENGTH} bytes`);
  // Imported once, not extractable; records that come before it is ready wait for it.
  let ready: WebCryptoKey | null = null;
  const imported = subtle
    .importKey('raw', Uint8Array.from(key), { name: 'AES-GCM' }, false, ['encrypt', 'decrypt'])
    .then((k) => {
      ready = k;
      return k;
    });
  imported.catch(() => undefined); // surfaced by the first use
  const run = (
    operation: 'encrypt' | 'decrypt',
    nonce: Uint8Array,
    ad: Uint8Array,
    data: Uint8Array,
  ): Promise<Uint8Array> => {
    // The nonce is copied now: the caller's moves on as soon as this returns. With the key ready, WebCrypto
    // takes copies of its inputs as it is called (its contract; Node's does too); before, they are copied here.
    const iv = Uint8Array.from(nonce);
    const call = (k: WebCryptoKey, additionalData: Uint8Array, bytes: Uint8Array) =>
      subtle[operation]({ name: 'AES-GCM', iv, additionalData, tagLength: TAG_LENGTH_BYTES * 8 }, k, bytes).then(
        (out) => new Uint8Array(out),
      );
    if (ready !== null) return call(ready, ad, data);
    const aad = Uint8Array.from(ad);
    const bytes = Uint8Array.from(data);
    return imported.then((k) => call(k, aad, bytes));
  };
  return {
    seal: (nonce, ad, plaintext) => run('encrypt', nonce, ad, plaintext),
    open(nonce, ad, ciphertext) {
      if (ciphertext.length < TAG_LENGTH_BYTES) return Promise.reject(new Error('ciphertext shorter than its tag'));
      return run('decrypt', nonce, ad, ciphertext);
    },
  };
}
