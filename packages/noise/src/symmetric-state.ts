import { CipherState } from './cipher-state.js';
import { type CipherName, type CryptoProvider, HASH_LENGTH, hkdf } from './crypto.js';
import { INSPECT, REDACTED } from './redact.js';

const EMPTY = new Uint8Array(0);

/** Noise spec §5.2 SymmetricState: chaining key ck, handshake hash h, and a CipherState. */
export class SymmetricState {
  readonly #provider: CryptoProvider;
  readonly #cipher: CipherName;
  readonly #cs: CipherState;
  #ck: Uint8Array;
  #h: Uint8Array;

  /** InitializeSymmetric(protocol_name): h = name padded to HASHLEN, or HASH(name) when longer. */
  constructor(provider: CryptoProvider, cipher: CipherName, protocolName: string) {
    this.#provider = provider;
    this.#cipher = cipher;
    const name = new TextEncoder().encode(protocolName);
    if (name.length <= HASH_LENGTH) {
      this.#h = new Uint8Array(HASH_LENGTH);
      this.#h.set(name);
    } else {
      this.#h = provider.hash([name]);
    }
    this.#ck = Uint8Array.from(this.#h);
    this.#cs = new CipherState(provider, cipher);
  }

  /** MixKey(ikm): (ck, temp_k) = HKDF(ck, ikm, 2); InitializeKey(temp_k). */
  mixKey(inputKeyMaterial: Uint8Array): void {
    const [ck, tempK] = hkdf(this.#provider, this.#ck, inputKeyMaterial, 2) as [Uint8Array, Uint8Array];
    this.#ck = ck;
    this.#cs.initializeKey(tempK);
  }

  /** MixHash(data): h = HASH(h ‖ data). */
  mixHash(data: Uint8Array): void {
    this.#h = this.#provider.hash([this.#h, data]);
  }

  /** MixKeyAndHash(ikm): (ck, temp_h, temp_k) = HKDF(ck, ikm, 3); MixHash(temp_h); InitializeKey(temp_k). */
  mixKeyAndHash(inputKeyMaterial: Uint8Array): void {
    const [ck, tempH, tempK] = hkdf(this.#provider, this.#ck, inputKeyMaterial, 3) as [
      Uint8Array,
      Uint8Array,
      Uint8Array,
    ];
    this.#ck = ck;
    this.mixHash(tempH);
    this.#cs.initializeKey(tempK);
  }

  getHandshakeHash(): Uint8Array {
    return Uint8Array.from(this.#h);
  }

  hasKey(): boolean {
    return this.#cs.hasKey();
  }

  /** EncryptAndHash(plaintext): ciphertext = EncryptWithAd(h, plaintext); MixHash(ciphertext). */
  encryptAndHash(plaintext: Uint8Array): Uint8Array {
    const ciphertext = this.#cs.encryptWithAd(this.#h, plaintext);
    this.mixHash(ciphertext);
    return ciphertext;
  }

  /** DecryptAndHash(ciphertext): plaintext = DecryptWithAd(h, ciphertext); MixHash(ciphertext). */
  decryptAndHash(ciphertext: Uint8Array): Uint8Array {
    const plaintext = this.#cs.decryptWithAd(this.#h, ciphertext);
    this.mixHash(ciphertext);
    return plaintext;
  }

  /** Split(): (k1, k2) = HKDF(ck, empty, 2); two fresh CipherStates. */
  split(): [CipherState, CipherState] {
    const [k1, k2] = hkdf(this.#provider, this.#ck, EMPTY, 2) as [Uint8Array, Uint8Array];
    return [new CipherState(this.#provider, this.#cipher, k1), new CipherState(this.#provider, this.#cipher, k2)];
  }

  toJSON(): object {
    return { ck: REDACTED, h: REDACTED, cs: this.#cs.toJSON() };
  }

  [INSPECT](): string {
    return `SymmetricState { ck: ${REDACTED}, h: ${REDACTED} }`;
  }
}
