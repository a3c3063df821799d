import { copyBytes } from './copy.js';
import { MessageFramingError } from './errors.js';
import { MAX_MESSAGE_BYTES, MAX_RECORD_PLAINTEXT_BYTES, MESSAGE_LENGTH_PREFIX_BYTES } from './limits.js';

// Message framing inside the Noise channel (spec §3.5): every JSON-RPC message is `len(u32 BE) ‖ json`,
// cut into plaintext records of at most 61 440 bytes, each encrypted as one Noise transport record.

function checkMessageLength(length: number): void {
  if (length === 0) throw new MessageFramingError('empty_message', 'message length must be at least 1 byte');
  if (length > MAX_MESSAGE_BYTES) {
    throw new MessageFramingError('message_too_large', `message length ${length} exceeds ${MAX_MESSAGE_BYTES} bytes`);
  }
}

/**
 * Frames one serialized JSON-RPC message: a 4-byte big-endian length prefix plus the bytes, cut into
 * records of at most 61 440 bytes (the last one may be shorter). The records are views into one copy
 * of the framed message, not into `json`. Throws `MessageFramingError` for an empty or > 64 MiB message.
 */
export function frameMessage(json: Uint8Array): Uint8Array[] {
  checkMessageLength(json.byteLength);
  const framed = new Uint8Array(MESSAGE_LENGTH_PREFIX_BYTES + json.byteLength);
  new DataView(framed.buffer).setUint32(0, json.byteLength, false);
  framed.set(json, MESSAGE_LENGTH_PREFIX_BYTES);
  const records: Uint8Array[] = [];
  for (let offset = 0; offset < framed.byteLength; offset += MAX_RECORD_PLAINTEXT_BYTES) {
    records.push(framed.subarray(offset, offset + MAX_RECORD_PLAINTEXT_BYTES));
  }
  return records;
}

/**
 * The same records as `frameMessage`, without copying `json`: each record is a list of parts to seal in
 * order (a sealer can take them straight, e.g. `Transport.encryptInto`). The first record is
 * [4-byte prefix, start of json]; every part after the prefix is a view into `json`, so the caller must
 * not change `json` until the records are sealed. Same checks as `frameMessage`.
 */
export function frameMessageParts(json: Uint8Array): Uint8Array[][] {
  checkMessageLength(json.byteLength);
  const prefix = new Uint8Array(MESSAGE_LENGTH_PREFIX_BYTES);
  new DataView(prefix.buffer).setUint32(0, json.byteLength, false);
  const firstBody = MAX_RECORD_PLAINTEXT_BYTES - MESSAGE_LENGTH_PREFIX_BYTES;
  const records: Uint8Array[][] = [[prefix, json.subarray(0, firstBody)]];
  for (let offset = firstBody; offset < json.byteLength; offset += MAX_RECORD_PLAINTEXT_BYTES) {
    records.push([json.subarray(offset, offset + MAX_RECORD_PLAINTEXT_BYTES)]);
  }
  return records;
}

/**
 * A message up to this size is assembled in one buffer of its declared length, taken when its first body
 * bytes arrive and filled in place (records can be opened straight into it: `bodyRoom`). A larger one is
 * kept as the chunks that arrived until it completes, so the memory it pins follows what was sent.
 */
const WHOLE_MESSAGE_BYTES = 4 * 1024 * 1024;

/** Uninitialised memory (no zero fill): the reassembler writes every byte. */
function allocateUnsafe(size: number): Uint8Array {
  const unsafe = Buffer.allocUnsafe(size);
  return new Uint8Array(unsafe.buffer, unsafe.byteOffset, size);
}

/**
 * Rebuilds messages from decrypted plaintext records, given in order. A record may finish one message
 * and start the next; a message may span many records. Declared lengths are checked as soon as the
 * 4-byte prefix is complete, before any of the body is buffered. A spanning message of up to 4 MiB is
 * written into one buffer of its declared length from its first body bytes on; a larger one is kept as
 * the received chunks, so what it pins follows what arrived (at most 4 B + 64 MiB), not what was declared.
 * Any error is final: the reassembler refuses every later record, as the stream must end.
 */
export class MessageReassembler {
  /** Memory for every message (uninitialised is fine: every byte is written). */
  readonly #allocate: (size: number) => Uint8Array;

  constructor(options: { readonly allocate?: (size: number) => Uint8Array } = {}) {
    this.#allocate = options.allocate ?? allocateUnsafe;
  }

  readonly #prefix = new Uint8Array(MESSAGE_LENGTH_PREFIX_BYTES);
  #prefixFilled = 0;
  /** Declared length of the message being read, or -1 while the prefix is incomplete. */
  #expected = -1;
  /** The message's own buffer (a message of up to 4 MiB, once its body started), else null. */
  #target: Uint8Array | null = null;
  /** The body as received (a larger message). */
  #chunks: Uint8Array[] = [];
  #bodyFilled = 0;
  /** The length handed out by the last `bodyRoom`, until `commitRoom` (-1: none). */
  #room = -1;
  #failure: MessageFramingError | undefined;

  /** Bytes held for the incomplete message (prefix included); at most 4 B + 64 MiB. */
  get bufferedBytes(): number {
    return this.#prefixFilled + this.#bodyFilled;
  }

  /** True when no partial message is held: the stream could end here cleanly. */
  get idle(): boolean {
    return this.bufferedBytes === 0;
  }

  /** Takes the next plaintext record and returns the messages it completes (JSON bytes, prefix removed). */
  push(record: Uint8Array): Uint8Array[] {
    if (this.#failure) {
      throw new MessageFramingError('failed', 'message framing already failed', { cause: this.#failure });
    }
    try {
      return this.#push(record);
    } catch (error) {
      if (error instanceof MessageFramingError) this.#failure = error;
      throw error;
    }
  }

  /**
   * True when the next record starts a message (nothing of one is held): a record opened into memory of
   * its own may then hold exactly one whole message (`wholeMessage`).
   */
  get atMessageStart(): boolean {
    return !this.#failure && this.#expected < 0 && this.#prefixFilled === 0;
  }

  /**
   * The message `record` holds, as a view of it, when the record is exactly one whole message (its prefix
   * and all its body) and the reassembler is at a message start; else null, and nothing changed (`push` it
   * then). For records opened into memory the caller hands over: the message keeps that memory, no copy.
   */
  wholeMessage(record: Uint8Array): Uint8Array | null {
    if (!this.atMessageStart || record.byteLength <= MESSAGE_LENGTH_PREFIX_BYTES) return null;
    if (record.byteLength > MAX_RECORD_PLAINTEXT_BYTES) return null;
    const length = new DataView(record.buffer, record.byteOffset, MESSAGE_LENGTH_PREFIX_BYTES).getUint32(0, false);
    if (length !== record.byteLength - MESSAGE_LENGTH_PREFIX_BYTES) return null;
    return record.subarray(MESSAGE_LENGTH_PREFIX_BYTES);
  }

  #push(record: Uint8Array): Uint8Array[] {
    if (record.byteLength > MAX_RECORD_PLAINTEXT_BYTES) {
      throw new MessageFramingError(
        'record_too_large',
        `plaintext record of ${record.byteLength} bytes exceeds ${MAX_RECORD_PLAINTEXT_BYTES}`,
      );
    }
    const messages: Uint8Array[] = [];
    let offset = 0;
    while (offset < record.byteLength) {
      if (this.#expected < 0) {
        const take = Math.min(MESSAGE_LENGTH_PREFIX_BYTES - this.#prefixFilled, record.byteLength - offset);
        this.#prefix.set(record.subarray(offset, offset + take), this.#prefixFilled);
        this.#prefixFilled += take;
        offset += take;
        if (this.#prefixFilled < MESSAGE_LENGTH_PREFIX_BYTES) break;
        const length = new DataView(this.#prefix.buffer).getUint32(0, false);
        checkMessageLength(length);
        this.#expected = length;
        continue;
      }
      const take = Math.min(this.#expected - this.#bodyFilled, record.byteLength - offset);
      const piece = record.subarray(offset, offset + take);
      offset += take;
      if (take === this.#expected) {
        // The whole message is in this record: a copy (the caller may reuse its buffer once push() returns),
        // into memory from the allocator like any other message (a pool's, whose buffers come back).
        const message = this.#allocate(take);
        message.set(piece);
        messages.push(message);
        this.#reset();
        continue;
      }
      const target = this.#ensureTarget();
      if (target !== null) target.set(piece, this.#bodyFilled);
      else this.#chunks.push(copyBytes(piece));
      this.#bodyFilled += take;
      if (this.#bodyFilled === this.#expected) messages.push(this.#takeMessage());
    }
    return messages;
  }

  /**
   * Where a record of `length` plaintext bytes can be opened straight into: when it holds only body bytes
   * of the message being read (the middle and end of a message of up to 4 MiB), the next `length` bytes of
   * that message's buffer; else null (open it elsewhere and `push` it). After opening a record into the
   * room, `commitRoom(length)` counts it and returns the message if it is now complete.
   */
  bodyRoom(length: number): Uint8Array | null {
    if (this.#failure || this.#expected < 0 || length === 0 || length > MAX_RECORD_PLAINTEXT_BYTES) return null;
    if (length > this.#expected - this.#bodyFilled) return null;
    const target = this.#ensureTarget();
    if (target === null) return null;
    this.#room = length;
    return target.subarray(this.#bodyFilled, this.#bodyFilled + length);
  }

  /** The buffer of the message being read, allocated at its declared length if it is at most 4 MiB; else null. */
  #ensureTarget(): Uint8Array | null {
    if (this.#target === null && this.#expected <= WHOLE_MESSAGE_BYTES) this.#target = this.#allocate(this.#expected);
    return this.#target;
  }

  /** Counts a record opened into `bodyRoom(length)`: returns the message it completes, if any. */
  commitRoom(length: number): Uint8Array[] {
    if (this.#room !== length || this.#target === null) throw new Error('commitRoom without a matching bodyRoom');
    this.#room = -1;
    this.#bodyFilled += length;
    return this.#bodyFilled === this.#expected ? [this.#takeMessage()] : [];
  }

  #takeMessage(): Uint8Array {
    // A message within one record never gets here (push hands it out whole), so chunks are always several.
    let message = this.#target;
    if (message === null) {
      message = this.#allocate(this.#expected);
      let at = 0;
      for (const chunk of this.#chunks) {
        message.set(chunk, at);
        at += chunk.byteLength;
      }
    }
    this.#reset();
    return message;
  }

  #reset(): void {
    this.#target = null;
    this.#chunks = [];
    this.#bodyFilled = 0;
    this.#prefixFilled = 0;
    this.#expected = -1;
  }
}
