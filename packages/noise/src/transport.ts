import type { CipherState } from './cipher-state.js';
import { TAG_LENGTH_BYTES } from './crypto.js';
import { NoiseError } from './errors.js';
import { MAX_NOISE_MESSAGE_LENGTH, MAX_TRANSPORT_PLAINTEXT } from './limits.js';
import { INSPECT } from './redact.js';

/**
 * The post-split pair of cipher states, and nothing else: the handshake does not outlive the handshake.
 * Nonces are implicit (n counts up from 0 per direction, AD empty), so a replayed, duplicated, dropped or
 * reordered record fails to decrypt. Never re-encrypt a plaintext for a retry: resend the same ciphertext.
 */
const EMPTY = new Uint8Array(0);

export class Transport {
  readonly #send: CipherState;
  readonly #recv: CipherState;
  readonly #handshakeHash: Uint8Array;

  constructor(send: CipherState, recv: CipherState, handshakeHash: Uint8Array) {
    this.#send = send;
    this.#recv = recv;
    this.#handshakeHash = Uint8Array.from(handshakeHash);
  }

  /** The nonce the next `encrypt` will use. */
  get sendNonce(): bigint {
    return this.#send.nonce;
  }

  /** The nonce the next `decrypt` expects. */
  get recvNonce(): bigint {
    return this.#recv.nonce;
  }

  /** The final handshake hash h, identical on both sides (channel binding). */
  get handshakeHash(): Uint8Array {
    return Uint8Array.from(this.#handshakeHash);
  }

  encrypt(plaintext: Uint8Array): Uint8Array {
    if (plaintext.length > MAX_TRANSPORT_PLAINTEXT) {
      throw new NoiseError('payload_too_large', `transport plaintext exceeds ${MAX_TRANSPORT_PLAINTEXT} bytes`);
    }
    return this.#send.encrypt(plaintext);
  }

  /**
   * Encrypts the concatenation of `parts` (at most 65 519 bytes in all) into `out`, which must be exactly
   * its length + 16: a record sealed straight into the buffer that carries it (e.g. a relay frame's
   * payload), without joining the parts first. Same bytes and nonce as `encrypt` of the joined parts.
   */
  encryptInto(parts: readonly Uint8Array[], out: Uint8Array): void {
    let length = 0;
    for (const part of parts) length += part.length;
    if (length > MAX_TRANSPORT_PLAINTEXT) {
      throw new NoiseError('payload_too_large', `transport plaintext exceeds ${MAX_TRANSPORT_PLAINTEXT} bytes`);
    }
    if (out.length !== length + TAG_LENGTH_BYTES) throw new RangeError('output buffer must be plaintext + 16 bytes');
    this.#send.encryptWithAdInto(EMPTY, parts, out);
  }

  decrypt(ciphertext: Uint8Array): Uint8Array {
    if (ciphertext.length > MAX_NOISE_MESSAGE_LENGTH) {
      throw new NoiseError('invalid_message', `transport message exceeds ${MAX_NOISE_MESSAGE_LENGTH} bytes`);
    }
    return this.#recv.decrypt(ciphertext);
  }

  /**
   * Decrypts one record into `out` (exactly its length - 16; may be the record's own first bytes, in
   * place) and returns `out`: a caller that owns a destination (a message being reassembled) skips the
   * fresh buffer `decrypt` returns. On failure `out` holds garbage and the nonce does not move.
   */
  decryptInto(ciphertext: Uint8Array, out: Uint8Array): Uint8Array {
    if (ciphertext.length > MAX_NOISE_MESSAGE_LENGTH) {
      throw new NoiseError('invalid_message', `transport message exceeds ${MAX_NOISE_MESSAGE_LENGTH} bytes`);
    }
    return this.#recv.decryptWithAdInto(EMPTY, ciphertext, out);
  }

  /** Whether `decryptAsync` opens records concurrently (the provider has an asynchronous AEAD for it). */
  get opensAsync(): boolean {
    return this.#recv.isAsync;
  }

  /** Whether `encryptAsync` seals records concurrently (the provider has an asynchronous AEAD for it). */
  get sealsAsync(): boolean {
    return this.#send.isAsync;
  }

  /**
   * Seals one record through the provider's asynchronous AEAD: call it for each record in sending order
   * (each takes the next nonce at once) and send the ciphertexts in that order. Without an asynchronous
   * AEAD, as `encrypt`. The plaintext may be reused once this returns.
   */
  encryptAsync(plaintext: Uint8Array): Promise<Uint8Array> {
    if (plaintext.length > MAX_TRANSPORT_PLAINTEXT) {
      return Promise.reject(
        new NoiseError('payload_too_large', `transport plaintext exceeds ${MAX_TRANSPORT_PLAINTEXT} bytes`),
      );
    }
    return this.#send.encryptWithAdAsync(EMPTY, plaintext);
  }

  /**
   * Opens one record through the provider's asynchronous AEAD: call it for each record in arrival order
   * (each takes the next nonce at once) and take the plaintexts in that order. A rejection means the
   * channel is over: the nonce has moved on. Without an asynchronous AEAD, as `decrypt`.
   */
  decryptAsync(ciphertext: Uint8Array): Promise<Uint8Array> {
    if (ciphertext.length > MAX_NOISE_MESSAGE_LENGTH) {
      return Promise.reject(
        new NoiseError('invalid_message', `transport message exceeds ${MAX_NOISE_MESSAGE_LENGTH} bytes`),
      );
    }
    return this.#recv.decryptWithAdAsync(EMPTY, ciphertext);
  }

  /** Split keys, for vector tests only: [send key, receive key]. */
  keysForTesting(): [Uint8Array, Uint8Array] {
    return [this.#send.keyForTesting()!, this.#recv.keyForTesting()!];
  }

  toJSON(): object {
    return { sendNonce: this.sendNonce.toString(), recvNonce: this.recvNonce.toString(), keys: '[redacted]' };
  }

  [INSPECT](): string {
    return `Transport { sendNonce: ${this.sendNonce}, recvNonce: ${this.recvNonce}, keys: [redacted] }`;
  }
}
