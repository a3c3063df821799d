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
 * Rebuilds messages from decrypted plaintext records, given in order. A record may finish one message
 * and start the next; a message may span many records. Declared lengths are checked as soon as the
 * 4-byte prefix is complete, before any of the body is buffered; the partial body is kept as the
 * received chunks, so memory follows what arrived (at most 4 B + 64 MiB), not what was declared.
 * Any error is final: the reassembler refuses every later record, as the stream must end.
 */
/** Uninitialised memory (no zero fill): the reassembler writes every byte. */
function allocateUnsafe(size: number): Uint8Array {
  const unsafe = Buffer.allocUnsafe(size);
  return new Uint8Array(unsafe.buffer, unsafe.byteOffset, size);
}

export class MessageReassembler {
  /** True when the caller hands over each record buffer (never reuses it): the reassembler keeps views. */
  readonly #ownsRecords: boolean;
  /** Memory for a message of several records (uninitialised is fine: every byte is written). */
  readonly #allocate: (size: number) => Uint8Array;

  constructor(
    options: { readonly takeOwnershipOfRecords?: boolean; readonly allocate?: (size: number) => Uint8Array } = {},
  ) {
    this.#ownsRecords = options.takeOwnershipOfRecords ?? false;
    this.#allocate = options.allocate ?? allocateUnsafe;
  }

  readonly #prefix = new Uint8Array(MESSAGE_LENGTH_PREFIX_BYTES);
  #prefixFilled = 0;
  /** Declared length of the message being read, or -1 while the prefix is incomplete. */
  #expected = -1;
  #chunks: Uint8Array[] = [];
  #bodyFilled = 0;
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
      // Copied unless the caller handed its record buffers over: it may reuse them once push() returns.
      this.#chunks.push(
        this.#ownsRecords ? record.subarray(offset, offset + take) : copyBytes(record, offset, offset + take),
      );
      this.#bodyFilled += take;
      offset += take;
      if (this.#bodyFilled === this.#expected) messages.push(this.#takeMessage());
    }
    return messages;
  }

  #takeMessage(): Uint8Array {
    if (this.#chunks.length === 1) {
      // One chunk is the whole message: hand it out without another copy.
      const [only] = this.#chunks;
      this.#chunks = [];
      this.#bodyFilled = 0;
      this.#prefixFilled = 0;
      this.#expected = -1;
      return only!;
    }
    const message = this.#allocate(this.#expected);
    let at = 0;
    for (const chunk of this.#chunks) {
      message.set(chunk, at);
      at += chunk.byteLength;
    }
    this.#chunks = [];
    this.#bodyFilled = 0;
    this.#prefixFilled = 0;
    this.#expected = -1;
    return message;
  }
}
