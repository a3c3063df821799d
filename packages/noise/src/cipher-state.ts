import {
  type AsyncAead,
  CIPHER_KEY_LENGTH,
  type CipherName,
  type CryptoProvider,
  type KeyedAead,
  oneShotAead,
  TAG_LENGTH_BYTES,
} from './crypto.js';
import { NoiseError } from './errors.js';
import { Nonce } from './nonce.js';
import { INSPECT, REDACTED } from './redact.js';

const EMPTY = new Uint8Array(0);

/** Noise spec §5.1 CipherState: a key k (or none) and a nonce n. */
export class CipherState {
  readonly cipher: CipherName;
  readonly #provider: CryptoProvider;
  #k: Uint8Array | null = null;
  /** The AEAD bound to k, made on first use (a handshake key may never seal anything). */
  #aead: KeyedAead | null = null;
  /** The provider's asynchronous AEAD for k: undefined until asked, null when it has none for this cipher. */
  #asyncAead: AsyncAead | null | undefined = undefined;
  readonly #n: Nonce;

  constructor(provider: CryptoProvider, cipher: CipherName, key: Uint8Array | null = null) {
    this.#provider = provider;
    this.cipher = cipher;
    this.#n = new Nonce(cipher);
    if (key !== null) this.initializeKey(key);
  }

  /** InitializeKey(key): sets k and resets n to 0. */
  initializeKey(key: Uint8Array): void {
    if (key.length !== CIPHER_KEY_LENGTH) throw new RangeError(`cipher keys are ${CIPHER_KEY_LENGTH} bytes`);
    this.#k = Uint8Array.from(key);
    this.#aead = null;
    this.#asyncAead = undefined;
    this.#n.set(0n);
  }

  hasKey(): boolean {
    return this.#k !== null;
  }

  /** The current counter n (the nonce the next message will use). */
  get nonce(): bigint {
    return this.#n.value;
  }

  /** SetNonce(n): for tests and explicit-nonce transports. */
  setNonce(n: bigint): void {
    this.#n.set(n);
  }

  /** The key, for vectors and split-key assertions only. */
  keyForTesting(): Uint8Array | null {
    return this.#k === null ? null : Uint8Array.from(this.#k);
  }

  #keyedAead(key: Uint8Array): KeyedAead {
    this.#aead ??= this.#provider.keyedAead?.(this.cipher, key) ?? oneShotAead(this.#provider, this.cipher, key);
    return this.#aead;
  }

  /** EncryptWithAd(ad, plaintext): passthrough without a key, else AEAD and n += 1. */
  encryptWithAd(ad: Uint8Array, plaintext: Uint8Array): Uint8Array {
    if (this.#k === null) return Uint8Array.from(plaintext);
    const ciphertext = new Uint8Array(plaintext.length + TAG_LENGTH_BYTES);
    this.encryptWithAdInto(ad, [plaintext], ciphertext);
    return ciphertext;
  }

  /**
   * EncryptWithAd of the concatenation of `parts`, written into `out` (ciphertext ‖ tag, exactly that
   * long; without a key, the plaintext itself). Same bytes and nonce rules as `encryptWithAd`.
   */
  encryptWithAdInto(ad: Uint8Array, parts: readonly Uint8Array[], out: Uint8Array): void {
    if (this.#k === null) {
      let at = 0;
      for (const part of parts) {
        out.set(part, at);
        at += part.length;
      }
      if (at !== out.length) throw new RangeError('output buffer has the wrong length');
      return;
    }
    this.#n.assertUsable();
    this.#keyedAead(this.#k).sealInto(this.#n.bytes(), ad, parts, out);
    this.#n.increment();
  }

  /** DecryptWithAd(ad, ciphertext): on authentication failure n is NOT incremented (spec §5.1). */
  decryptWithAd(ad: Uint8Array, ciphertext: Uint8Array): Uint8Array {
    if (this.#k === null) return Uint8Array.from(ciphertext);
    this.#n.assertUsable();
    let plaintext: Uint8Array;
    try {
      plaintext = this.#keyedAead(this.#k).open(this.#n.bytes(), ad, ciphertext);
    } catch (cause) {
      throw new NoiseError('decrypt_failed', 'decryption failed: message was tampered, replayed or reordered', {
        cause,
      });
    }
    this.#n.increment();
    return plaintext;
  }

  /**
   * DecryptWithAd into `out` (exactly the ciphertext's length - 16; it may be the ciphertext's own first
   * bytes): returns `out`. Same nonce rules as `decryptWithAd`; on failure `out` holds garbage.
   */
  decryptWithAdInto(ad: Uint8Array, ciphertext: Uint8Array, out: Uint8Array): Uint8Array {
    if (this.#k === null) {
      if (out.length !== ciphertext.length) throw new RangeError('output buffer has the wrong length');
      out.set(ciphertext);
      return out;
    }
    this.#n.assertUsable();
    if (out.length !== ciphertext.length - TAG_LENGTH_BYTES) throw new RangeError('output buffer has the wrong length');
    try {
      this.#keyedAead(this.#k).openInto(this.#n.bytes(), ad, ciphertext, out);
    } catch (cause) {
      throw new NoiseError('decrypt_failed', 'decryption failed: message was tampered, replayed or reordered', {
        cause,
      });
    }
    this.#n.increment();
    return out;
  }

  /** Whether `encryptWithAdAsync`/`decryptWithAdAsync` use the provider's asynchronous AEAD (else at once). */
  get isAsync(): boolean {
    return this.#k !== null && this.#asyncAeadFor(this.#k) !== null;
  }

  #asyncAeadFor(key: Uint8Array): AsyncAead | null {
    if (this.#asyncAead === undefined) this.#asyncAead = this.#provider.asyncAead?.(this.cipher, key) ?? null;
    return this.#asyncAead;
  }

  /**
   * EncryptWithAd through the provider's asynchronous AEAD: the nonce is taken, and n moves on, when this is
   * called, so records are handed over in order and sealed concurrently; their ciphertexts must be sent in
   * that order. Without an asynchronous AEAD (or a key) this seals at once, as `encryptWithAd`.
   */
  encryptWithAdAsync(ad: Uint8Array, plaintext: Uint8Array): Promise<Uint8Array> {
    return this.#withAsyncAead(
      (aead, nonce) => aead.seal(nonce, ad, plaintext),
      () => this.encryptWithAd(ad, plaintext),
    );
  }

  /**
   * DecryptWithAd through the provider's asynchronous AEAD: the nonce is taken, and n moves on, when this
   * is called, so records are handed over in order and opened concurrently; their plaintexts must then be
   * taken in the same order. Unlike `decryptWithAd`, n has moved on even if the record fails to open: the
   * caller must end the channel on a rejection (a transport does). Without an asynchronous AEAD this opens
   * at once, as `decryptWithAd`.
   */
  decryptWithAdAsync(ad: Uint8Array, ciphertext: Uint8Array): Promise<Uint8Array> {
    return this.#withAsyncAead(
      (aead, nonce) =>
        aead.open(nonce, ad, ciphertext).catch((cause: unknown) => {
          throw new NoiseError('decrypt_failed', 'decryption failed: message was tampered, replayed or reordered', {
            cause,
          });
        }),
      () => this.decryptWithAd(ad, ciphertext),
    );
  }

  /** Runs `use` with the asynchronous AEAD and this message's nonce (then n += 1), else `fallback` at once. */
  #withAsyncAead(
    use: (aead: AsyncAead, nonce: Uint8Array) => Promise<Uint8Array>,
    fallback: () => Uint8Array,
  ): Promise<Uint8Array> {
    try {
      const aead = this.#k === null ? null : this.#asyncAeadFor(this.#k);
      if (aead === null) return Promise.resolve(fallback());
      this.#n.assertUsable();
      // A copy: the counter's bytes are rewritten by the increment below, and an AEAD may read them later.
      const answer = use(aead, Uint8Array.from(this.#n.bytes()));
      this.#n.increment();
      return answer;
    } catch (err) {
      return Promise.reject(err);
    }
  }

  encrypt(plaintext: Uint8Array): Uint8Array {
    return this.encryptWithAd(EMPTY, plaintext);
  }

  decrypt(ciphertext: Uint8Array): Uint8Array {
    return this.decryptWithAd(EMPTY, ciphertext);
  }

  toJSON(): object {
    return { cipher: this.cipher, k: this.#k === null ? null : REDACTED, n: this.#n.value.toString() };
  }

  [INSPECT](): string {
    return `CipherState { cipher: '${this.cipher}', k: ${this.#k === null ? 'null' : REDACTED}, n: ${this.#n.value} }`;
  }
}
