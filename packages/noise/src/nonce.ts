import { type CipherName, NONCE_LENGTH } from './crypto.js';
import { NoiseError } from './errors.js';

/**
 * Noise spec §5.1: n = 2^64 - 1 is reserved (for rekey) and must never be used to encrypt, so the
 * largest usable counter is 2^64 - 2. Reaching the reserved value is a fatal `nonce_exhausted` error.
 */
export const MAX_NONCE = 2n ** 64n - 1n;

/**
 * The 64-bit counter and its 12-byte layout, which depends on the cipher (Noise spec §12):
 * AESGCM = 4 zero bytes ‖ u64 big-endian; ChaChaPoly = 4 zero bytes ‖ u64 little-endian.
 * Codex (Clatter `aes.rs`) uses the big-endian AES-GCM layout, which is easy to get wrong.
 */
export class Nonce {
  readonly #bytes = new Uint8Array(NONCE_LENGTH);
  readonly #view = new DataView(this.#bytes.buffer);
  readonly #littleEndian: boolean;
  #value = 0n;

  constructor(cipher: CipherName, value = 0n) {
    this.#littleEndian = cipher === 'ChaChaPoly';
    this.set(value);
  }

  get value(): bigint {
    return this.#value;
  }

  set(value: bigint): void {
    if (value < 0n || value > MAX_NONCE) throw new RangeError('nonce out of range');
    this.#value = value;
    this.#view.setBigUint64(4, value, this.#littleEndian);
  }

  /** Throws `nonce_exhausted` when the counter reached the reserved value. */
  assertUsable(): void {
    if (this.#value >= MAX_NONCE) throw new NoiseError('nonce_exhausted', 'nonce exhausted: no more messages');
  }

  /** The 12-byte nonce for the current counter (a view valid until the next increment). */
  bytes(): Uint8Array {
    return this.#bytes;
  }

  increment(): void {
    this.set(this.#value + 1n);
  }
}
