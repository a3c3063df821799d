import { NoiseError } from './errors.js';

/** Cursor over an incoming handshake message; running short is `invalid_message`, never a partial read. */
export class MessageReader {
  readonly #bytes: Uint8Array;
  #offset = 0;

  constructor(bytes: Uint8Array) {
    this.#bytes = bytes;
  }

  take(length: number, what: string): Uint8Array {
    if (this.#bytes.length - this.#offset < length) {
      throw new NoiseError('invalid_message', `handshake message too short: missing ${what}`);
    }
    const out = this.#bytes.subarray(this.#offset, this.#offset + length);
    this.#offset += length;
    return out;
  }

  rest(): Uint8Array {
    const out = this.#bytes.subarray(this.#offset);
    this.#offset = this.#bytes.length;
    return out;
  }
}
