import { SequenceError } from './errors.js';
import { MAX_REORDER_BYTES, MAX_REORDER_DISTANCE, MAX_REORDER_RECORDS, MAX_SEQ } from './limits.js';

// Record ordering (spec §3.5): `seq` is per stream and direction, starts at 0, +1 per record, and is
// the explicit ordering key of the implicit Noise nonce, so records must reach the decryptor in exact
// seq order. It is a u32 that never wraps.

function checkSeq(seq: number): void {
  if (!Number.isInteger(seq) || seq < 0 || seq > MAX_SEQ) {
    throw new SequenceError('invalid_seq', `seq ${seq} is not a u32`);
  }
}

function tighterLimit(name: string, value: number | undefined, wireLimit: number): number {
  if (value === undefined) return wireLimit;
  if (!Number.isInteger(value) || value < 0 || value > wireLimit) {
    throw new RangeError(`${name} must be an integer from 0 to the wire limit ${wireLimit}`);
  }
  return value;
}

/** Defaults are the wire limits (spec §3.5); a caller may only want them tighter. */
export interface OrderedReceiveWindowOptions {
  /** The seq expected first: 0 on the wire; other values let tests reach the end of the u32 space. */
  readonly firstSeq?: number;
  /** How far ahead of `nextSeq` a record may be (default 64). */
  readonly maxDistance?: number;
  /** Records buffered out of order (default 64). */
  readonly maxRecords?: number;
  /** Bytes buffered out of order (default 1 MiB). */
  readonly maxBytes?: number;
}

/**
 * The receiving side's reorder window (codex `ordered_ciphertext.rs`). A record with `seq < next` or
 * one already buffered is dropped silently (first copy wins). A record ahead of `next` is buffered
 * while it is at most 64 ahead and the buffer stays within 64 records and 1 MiB; otherwise the stream
 * fails. The record with `seq == next` is released together with every now-contiguous buffered record,
 * in order. Every error is final: later pushes throw too.
 */
export class OrderedReceiveWindow {
  #next: number;
  #exhausted = false;
  readonly #buffered = new Map<number, Uint8Array>();
  #bufferedBytes = 0;
  #duplicates = 0;
  #failure: SequenceError | undefined;

  readonly #maxDistance: number;
  readonly #maxRecords: number;
  readonly #maxBytes: number;

  constructor(options: OrderedReceiveWindowOptions = {}) {
    this.#next = options.firstSeq ?? 0;
    checkSeq(this.#next);
    this.#maxDistance = tighterLimit('maxDistance', options.maxDistance, MAX_REORDER_DISTANCE);
    this.#maxRecords = tighterLimit('maxRecords', options.maxRecords, MAX_REORDER_RECORDS);
    this.#maxBytes = tighterLimit('maxBytes', options.maxBytes, MAX_REORDER_BYTES);
  }

  /** The seq the decryptor needs next. */
  get nextSeq(): number {
    return this.#next;
  }

  get bufferedRecords(): number {
    return this.#buffered.size;
  }

  get bufferedBytes(): number {
    return this.#bufferedBytes;
  }

  /** Records dropped as duplicates so far (for metrics). */
  get droppedDuplicates(): number {
    return this.#duplicates;
  }

  /** Accepts one record and returns the records now deliverable, in seq order (often none or one). */
  push(seq: number, record: Uint8Array): Uint8Array[] {
    if (this.#failure) throw new SequenceError('failed', 'receive window already failed', { cause: this.#failure });
    try {
      return this.#push(seq, record);
    } catch (error) {
      if (error instanceof SequenceError) this.#failure = error;
      throw error;
    }
  }

  #push(seq: number, record: Uint8Array): Uint8Array[] {
    checkSeq(seq);
    if (this.#exhausted) {
      throw new SequenceError('seq_exhausted', 'the u32 sequence space is exhausted; the stream must end');
    }
    if (seq < this.#next || this.#buffered.has(seq)) {
      this.#duplicates += 1;
      return [];
    }
    if (seq > this.#next) {
      if (seq - this.#next > this.#maxDistance) {
        throw new SequenceError(
          'window_distance',
          `seq ${seq} is more than ${this.#maxDistance} ahead of ${this.#next}`,
        );
      }
      if (this.#buffered.size + 1 > this.#maxRecords) {
        throw new SequenceError('window_records', `more than ${this.#maxRecords} records out of order`);
      }
      if (this.#bufferedBytes + record.byteLength > this.#maxBytes) {
        throw new SequenceError('window_bytes', `more than ${this.#maxBytes} bytes out of order`);
      }
      this.#buffered.set(seq, record);
      this.#bufferedBytes += record.byteLength;
      return [];
    }
    const released = [record];
    this.#advance();
    for (let buffered = this.#buffered.get(this.#next); buffered; buffered = this.#buffered.get(this.#next)) {
      this.#buffered.delete(this.#next);
      this.#bufferedBytes -= buffered.byteLength;
      released.push(buffered);
      this.#advance();
    }
    return released;
  }

  #advance(): void {
    if (this.#next === MAX_SEQ) {
      this.#exhausted = true;
    } else {
      this.#next += 1;
    }
  }
}

/** The sending side's counter: 0, 1, 2, … up to 2^32 − 1, then `seq_exhausted` (never wraps). */
export class SendSequence {
  #next: number;
  #exhausted = false;

  /** `firstSeq` is the first seq handed out: 0 on the wire (spec §3.5); other values let tests reach the u32 end. */
  constructor(options: { readonly firstSeq?: number } = {}) {
    this.#next = options.firstSeq ?? 0;
    checkSeq(this.#next);
  }

  /** The seq the next record will carry, or null once exhausted. */
  get nextSeq(): number | null {
    return this.#exhausted ? null : this.#next;
  }

  /** Returns the seq for the next record and advances; throws `SequenceError` once all u32 values are used. */
  take(): number {
    if (this.#exhausted) {
      throw new SequenceError('seq_exhausted', 'the u32 sequence space is exhausted; the stream must end');
    }
    const seq = this.#next;
    if (seq === MAX_SEQ) this.#exhausted = true;
    else this.#next += 1;
    return seq;
  }
}
