import { BinaryReader, BinaryWriter, WireType } from '@bufbuild/protobuf/wire';
import { copyBytes } from './copy.js';
import { FrameError } from './errors.js';
import type { DataFrame, Frame } from './frame.js';
import { isValidStreamId, validateFrame } from './frame.js';
import { MAX_FRAME_BYTES, MAX_SEQ, MAX_STREAM_ID_BYTES, RELAY_PROTOCOL_VERSION } from './limits.js';
import { type RelayBody, type RelayMessage, readRelayMessage, writeRelayMessage } from './message.js';

/** Field numbers of the `body` oneof (data … handshake). */
const FIRST_BODY_FIELD = 5;
const LAST_BODY_FIELD = 10;

export interface CodecOptions {
  /** Largest encoded frame accepted; defaults to the 256 KiB WebSocket message limit. */
  readonly maxBytes?: number;
}

export interface DecodeOptions extends CodecOptions {
  /**
   * `false` lets a decoded payload be a view into the input (no copy), for callers that own the
   * input buffer and never write to it again, such as a socket's freshly received message. Default true.
   */
  readonly copyPayload?: boolean;
}

function bodyOf(frame: Frame): RelayBody {
  switch (frame.kind) {
    case 'data':
      // segment_index 0 is omitted on the wire; segment_count is always 1 (no relay-level segmentation).
      return { case: 'data', value: { seq: frame.seq, segmentIndex: 0, segmentCount: 1, payload: frame.payload } };
    case 'ack':
      return { case: 'ackFrame', value: {} };
    case 'resume':
      return { case: 'resume', value: { nextSeq: frame.nextSeq } };
    case 'reset':
      return { case: 'reset', value: { reason: frame.reason } };
    case 'heartbeat':
      return { case: 'heartbeat', value: {} };
    case 'handshake':
      return { case: 'handshake', value: { payload: frame.payload } };
  }
}

/**
 * Encodes a frame as one protobuf `RelayMessageFrame` (one WebSocket binary message). Validates first,
 * as the receiver would, and refuses a result larger than `maxBytes`: an invalid frame never leaves.
 */
export function encodeFrame(frame: Frame, options: CodecOptions = {}): Uint8Array {
  const bytes = EncodedDataFrame.wireOf(frame) ?? encodeValidated(validateFrame(frame));
  const maxBytes = options.maxBytes ?? MAX_FRAME_BYTES;
  if (bytes.byteLength > maxBytes) {
    throw new FrameError('too_large', `encoded frame is ${bytes.byteLength} bytes, over the ${maxBytes}-byte limit`);
  }
  return bytes;
}

function encodeValidated(frame: Frame): Uint8Array {
  return frame.kind === 'data' && frame.traceparent === undefined && frame.tracestate === undefined
    ? encodeDataFrame(frame)
    : encodeGeneric(frame);
}

/**
 * A frozen Data frame that carries its own wire bytes (its payload is a view into them), as built by
 * `DataFrameEncoder`. The bytes are a private field rather than a WeakMap entry: a WeakMap would keep
 * every frame's bytes alive until a full GC, and a busy stream would then run one every few megabytes.
 */
class EncodedDataFrame implements DataFrame {
  readonly kind = 'data';
  readonly ack = 0;
  readonly ackBits = 0;
  readonly #wire: Uint8Array;

  constructor(
    readonly streamId: string,
    readonly seq: number,
    readonly payload: Uint8Array,
    wire: Uint8Array,
  ) {
    this.#wire = wire;
    Object.freeze(this);
  }

  static wireOf(frame: Frame): Uint8Array | undefined {
    return #wire in frame ? (frame as EncodedDataFrame).#wire : undefined;
  }
}

function varintLength(value: number): number {
  let length = 1;
  while (value > 0x7f) {
    value >>>= 7;
    length += 1;
  }
  return length;
}

function writeVarint(out: Uint8Array, at: number, value: number): number {
  while (value > 0x7f) {
    out[at++] = (value & 0x7f) | 0x80;
    value >>>= 7;
  }
  out[at++] = value;
  return at;
}

/** Tag bytes (field << 3 | wire type) of the Data-frame fields written by hand. */
const TAG_BODY_DATA = (5 << 3) | WireType.LengthDelimited;
const TAG_DATA_SEQ = (1 << 3) | WireType.Varint;
const TAG_DATA_SEGMENT_COUNT = (3 << 3) | WireType.Varint;
const TAG_DATA_PAYLOAD = (4 << 3) | WireType.LengthDelimited;

/**
 * Builds the Data frames of one stream around their payload, for senders that produce the payload
 * themselves (a sealer writing ciphertext): `allocate(seq, length)` returns a frozen, validated
 * `DataFrame` whose `payload` is a writable view into the frame's own wire bytes, so `encodeFrame`
 * returns those bytes without encoding or copying anything. The constant head (version, stream id) is
 * encoded once by the library's writer; the per-frame fields (body tag and length, seq, segment count,
 * payload length) are varints written by hand, the same bytes as `encodeFrame` (a property test pins
 * them to the generic encoder). The frame is the stream's: ack fields 0, no trace context.
 */
export class DataFrameEncoder {
  readonly streamId: string;
  readonly #head: Uint8Array;

  constructor(streamId: string) {
    if (!isValidStreamId(streamId)) {
      throw new FrameError('invalid_stream_id', 'stream_id must be non-blank, unpadded and at most 128 bytes');
    }
    this.streamId = streamId;
    const head = new BinaryWriter();
    head.tag(1, WireType.Varint).uint32(RELAY_PROTOCOL_VERSION);
    head.tag(2, WireType.LengthDelimited).string(streamId);
    this.#head = head.finish();
  }

  /**
   * A Data frame with `payloadLength` bytes of payload to fill in before it is sent. The payload is
   * uninitialised memory (not zeroed, for speed): the caller must write every byte of it, or drop the
   * frame. `alloc` supplies the wire bytes (exactly the size asked; default a fresh buffer), e.g. from a
   * pool whose buffer the caller takes back once the frame is written.
   */
  allocate(seq: number, payloadLength: number, alloc: (size: number) => Uint8Array = Buffer.allocUnsafe): DataFrame {
    if (!Number.isInteger(seq) || seq < 0 || seq > MAX_SEQ) {
      throw new FrameError('invalid_data', 'data seq must be a u32');
    }
    if (!Number.isInteger(payloadLength) || payloadLength < 1) {
      throw new FrameError('invalid_data', 'data payload must be non-empty');
    }
    const innerLength = (seq === 0 ? 0 : 1 + varintLength(seq)) + 2 + 1 + varintLength(payloadLength) + payloadLength;
    const head = this.#head;
    const total = head.byteLength + 1 + varintLength(innerLength) + innerLength;
    if (total > MAX_FRAME_BYTES) {
      throw new FrameError('too_large', `encoded frame is ${total} bytes, over the ${MAX_FRAME_BYTES}-byte limit`);
    }
    // Uninitialised memory: every byte is written, the head here and the payload by the caller.
    const unsafe = alloc(total);
    const bytes = new Uint8Array(unsafe.buffer, unsafe.byteOffset, total);
    bytes.set(head, 0);
    let at = head.byteLength;
    bytes[at++] = TAG_BODY_DATA;
    at = writeVarint(bytes, at, innerLength);
    if (seq !== 0) {
      bytes[at++] = TAG_DATA_SEQ;
      at = writeVarint(bytes, at, seq);
    }
    bytes[at++] = TAG_DATA_SEGMENT_COUNT;
    bytes[at++] = 1;
    bytes[at++] = TAG_DATA_PAYLOAD;
    at = writeVarint(bytes, at, payloadLength);
    return new EncodedDataFrame(this.streamId, seq, bytes.subarray(at), bytes);
  }
}

/**
 * The hot path: a Data frame without trace fields. The library's writer encodes every field but the
 * payload bytes; the payload is then copied exactly once, after both headers (the generic path copies
 * it into the writer and again when finishing). Same bytes as the generic encoder (a test checks).
 */
function encodeDataFrame(frame: DataFrame): Uint8Array {
  const inner = new BinaryWriter();
  if (frame.seq !== 0) inner.tag(1, WireType.Varint).uint32(frame.seq);
  inner.tag(3, WireType.Varint).uint32(1); // segment_count; segment_index 0 is omitted
  inner.tag(4, WireType.LengthDelimited).uint32(frame.payload.byteLength);
  const innerHead = inner.finish();
  const outer = new BinaryWriter();
  outer.tag(1, WireType.Varint).uint32(RELAY_PROTOCOL_VERSION);
  outer.tag(2, WireType.LengthDelimited).string(frame.streamId);
  if (frame.ack !== 0) outer.tag(3, WireType.Varint).uint32(frame.ack);
  if (frame.ackBits !== 0) outer.tag(4, WireType.Varint).uint32(frame.ackBits);
  outer.tag(5, WireType.LengthDelimited).uint32(innerHead.byteLength + frame.payload.byteLength);
  const outerHead = outer.finish();
  const out = new Uint8Array(outerHead.byteLength + innerHead.byteLength + frame.payload.byteLength);
  out.set(outerHead, 0);
  out.set(innerHead, outerHead.byteLength);
  out.set(frame.payload, outerHead.byteLength + innerHead.byteLength);
  return out;
}

function encodeGeneric(frame: Frame): Uint8Array {
  const message: RelayMessage = {
    version: RELAY_PROTOCOL_VERSION,
    streamId: frame.streamId,
    ack: frame.ack,
    ackBits: frame.ackBits,
    body: bodyOf(frame),
    ...(frame.traceparent !== undefined && { traceparent: frame.traceparent }),
    ...(frame.tracestate !== undefined && { tracestate: frame.tracestate }),
  };
  try {
    return writeRelayMessage(message);
  } catch (cause) {
    throw new FrameError('malformed', 'frame could not be encoded', { cause });
  }
}

/** The generic encoder for any frame (message.ts); exported for the test that pins the fast path to it. */
export { encodeGeneric as encodeFrameGeneric };

/** The generic decoder (copying payloads), for the tests that pin the canonical fast path to it. */
export function decodeFrameGeneric(bytes: Uint8Array, options: CodecOptions = {}): Frame {
  checkSize(bytes, options.maxBytes ?? MAX_FRAME_BYTES);
  return decodeGeneric(bytes, true);
}

/**
 * Walks the fields of one message with a reader bounded by exactly its bytes, calling `visit` for each
 * field (which must consume it) or skipping it. Throws the library's error on any malformed tag,
 * truncated value or unbalanced group.
 */
function walkFields(bytes: Uint8Array, visit?: (fieldNo: number, wireType: WireType, reader: BinaryReader) => boolean) {
  const reader = new BinaryReader(bytes);
  while (reader.pos < reader.len) {
    const [fieldNo, wireType] = reader.tag();
    if (visit?.(fieldNo, wireType, reader)) continue;
    if (wireType === WireType.Varint) skipVarint(bytes, reader);
    else reader.skip(wireType, fieldNo);
  }
}

/**
 * Skips a varint of at most 10 bytes. The library's skip reads a varint of any length; prost (codex's decoder)
 * refuses one over 10 bytes, and so does the relay's header peek: a frame one side refuses the other must too.
 */
function skipVarint(bytes: Uint8Array, reader: BinaryReader): void {
  for (let n = 0; n < 10; n++) {
    if (reader.pos >= reader.len) throw new Error('premature end of a varint');
    if (((bytes[reader.pos++] as number) & 0x80) === 0) return;
  }
  throw new Error('a varint longer than 10 bytes');
}

/**
 * Structural check run before the message is read (message.ts): the frame and its body message must each
 * be well-formed within their own bounds, and known fields have their own wire types. protobuf-es's
 * `fromBinary`, the reference, reads a sub-message with a reader over the whole frame, so it lets a varint
 * run past the end of the body and accepts bytes a strict decoder (codex's prost) refuses.
 */
function checkWellFormed(bytes: Uint8Array): void {
  walkFields(bytes, (fieldNo, wireType, reader) => {
    checkWireType(FRAME_WIRE_TYPES, fieldNo, wireType);
    if (fieldNo < FIRST_BODY_FIELD || fieldNo > LAST_BODY_FIELD) return false;
    const bodyTypes = BODY_WIRE_TYPES[fieldNo];
    walkFields(reader.bytes(), (innerNo, innerType) => {
      if (bodyTypes) checkWireType(bodyTypes, innerNo, innerType);
      return false;
    });
    return true;
  });
}

const V = WireType.Varint;
const L = WireType.LengthDelimited;
/** Wire types of the known fields (relay.v1.proto); unknown fields may be anything. */
const FRAME_WIRE_TYPES: Readonly<Record<number, WireType>> = {
  1: V,
  2: L,
  3: V,
  4: V,
  5: L,
  6: L,
  7: L,
  8: L,
  9: L,
  10: L,
  11: L,
  12: L,
};
const BODY_WIRE_TYPES: Readonly<Record<number, Readonly<Record<number, WireType>>>> = {
  5: { 1: V, 2: V, 3: V, 4: L }, // RelayData
  6: {}, // RelayAck
  7: { 1: V }, // RelayResume
  8: { 1: L }, // RelayReset
  9: {}, // RelayHeartbeat
  10: { 1: L }, // RelayHandshake
};

/**
 * A known field with another wire type is malformed (prost, codex's decoder, refuses it); the library
 * would read it anyway, with a meaning the relay's peek and the sender never agreed on.
 */
function checkWireType(types: Readonly<Record<number, WireType>>, fieldNo: number, wireType: WireType): void {
  const expected = types[fieldNo];
  if (expected !== undefined && expected !== wireType) {
    throw new Error(`field ${fieldNo} has wire type ${wireType}, expected ${expected}`);
  }
}

function checkSize(bytes: Uint8Array, maxBytes: number): void {
  if (bytes.byteLength > maxBytes) {
    throw new FrameError('too_large', `frame is ${bytes.byteLength} bytes, over the ${maxBytes}-byte limit`);
  }
}

/**
 * Decodes and validates one frame (spec §3.3). The size is checked before parsing; unknown fields are
 * skipped (newer senders add some); missing scalars default to 0 / "". Payloads are copied, so the
 * result never aliases `bytes`, unless `copyPayload: false` asks for views. Canonical Data frames take a
 * hand-written path that accepts nothing the generic one would decode differently. Throws only `FrameError`.
 */
export function decodeFrame(bytes: Uint8Array, options: DecodeOptions = {}): Frame {
  checkSize(bytes, options.maxBytes ?? MAX_FRAME_BYTES);
  const copyPayload = options.copyPayload ?? true;
  return decodeCanonicalData(bytes, copyPayload) ?? decodeGeneric(bytes, copyPayload);
}

/** Reads a varint of at most 5 bytes that fits a u32 ([value, next offset]); null otherwise. */
function readU32(bytes: Uint8Array, at: number, end: number): [value: number, next: number] | null {
  let value = 0;
  for (let i = 0; i < 5 && at < end; i++) {
    const byte = bytes[at++]!;
    if (i === 4 && byte > 0x0f) return null;
    value += (byte & 0x7f) * 2 ** (7 * i);
    if (byte < 0x80) return [value, at];
  }
  return null;
}

/**
 * The receive hot path: a Data frame in exactly the layout `encodeFrame` and codex (prost) write —
 * version 1, an ASCII stream id, no ack fields, the data body last with its fields in order (seq if not 0,
 * segment_count 1, a non-empty payload), nothing after it. Anything else returns null and goes through
 * the generic decoder, so this path only ever accepts bytes the generic decoder decodes to the same frame
 * (a property test checks it on encoded and mutated frames).
 */
function decodeCanonicalData(bytes: Uint8Array, copyPayload: boolean): DataFrame | null {
  const end = bytes.byteLength;
  if (end < 10 || bytes[0] !== 0x08 || bytes[1] !== RELAY_PROTOCOL_VERSION || bytes[2] !== 0x12) return null;
  const idLength = readU32(bytes, 3, end);
  if (!idLength) return null;
  const idStart = idLength[1];
  const idEnd = idStart + idLength[0];
  if (idLength[0] === 0 || idEnd >= end || bytes[idEnd] !== TAG_BODY_DATA) return null;
  const inner = readU32(bytes, idEnd + 1, end);
  if (!inner || inner[1] + inner[0] !== end) return null;
  let at = inner[1];
  let seq = 0;
  if (bytes[at] === TAG_DATA_SEQ) {
    const read = readU32(bytes, at + 1, end);
    if (!read) return null;
    [seq, at] = read;
  }
  if (bytes[at] !== TAG_DATA_SEGMENT_COUNT || bytes[at + 1] !== 1 || bytes[at + 2] !== TAG_DATA_PAYLOAD) return null;
  const payloadLength = readU32(bytes, at + 3, end);
  if (!payloadLength || payloadLength[0] === 0 || payloadLength[1] + payloadLength[0] !== end) return null;
  const streamId = asciiStreamId(bytes, idStart, idEnd);
  if (streamId === null || !isValidStreamId(streamId)) return null;
  const payload = copyPayload ? copyBytes(bytes, payloadLength[1]) : bytes.subarray(payloadLength[1]);
  return { kind: 'data', streamId, ack: 0, ackBits: 0, seq, payload };
}

/**
 * The stream id if all its bytes are ASCII (decoded as any UTF-8 decoder would), else null. Read from
 * `bytes` every time: the codec keeps nothing between calls. Its callers' inputs are slabs of shared
 * inbound pools, reused for another socket's frame as soon as one is handled, so anything remembered of
 * one frame (as a view, or compared against the next) would let one stream's id name another's frame.
 * Building a string of at most 128 ASCII bytes costs nothing next to opening the frame's payload.
 */
function asciiStreamId(bytes: Uint8Array, start: number, end: number): string | null {
  const length = end - start;
  if (length > MAX_STREAM_ID_BYTES) return null;
  let id = '';
  for (let i = start; i < end; i++) {
    const byte = bytes[i]!;
    if (byte > 0x7f) return null;
    id += String.fromCharCode(byte);
  }
  return id;
}

function decodeGeneric(bytes: Uint8Array, copyPayload: boolean): Frame {
  let message: RelayMessage;
  try {
    checkWellFormed(bytes);
    message = readRelayMessage(bytes);
  } catch (cause) {
    throw new FrameError('malformed', 'frame is not a valid RelayMessageFrame', { cause });
  }
  if (message.version !== RELAY_PROTOCOL_VERSION) {
    throw new FrameError('invalid_version', `unsupported relay frame version ${message.version}`);
  }
  const header = {
    streamId: message.streamId,
    ack: message.ack,
    ackBits: message.ackBits,
    ...(message.traceparent !== undefined && { traceparent: message.traceparent }),
    ...(message.tracestate !== undefined && { tracestate: message.tracestate }),
  };
  if (!isValidStreamId(header.streamId)) {
    throw new FrameError('invalid_stream_id', 'stream_id must be non-blank, unpadded and at most 128 bytes');
  }
  const body = message.body;
  switch (body.case) {
    case 'data':
      if (body.value.segmentIndex !== 0 || body.value.segmentCount !== 1) {
        throw new FrameError('invalid_data', 'data must be a single segment (index 0, count 1)');
      }
      return validateFrame({
        kind: 'data',
        ...header,
        seq: body.value.seq,
        payload: copyPayload ? copyBytes(body.value.payload) : body.value.payload,
      });
    case 'ackFrame':
      return validateFrame({ kind: 'ack', ...header });
    case 'resume':
      return validateFrame({ kind: 'resume', ...header, nextSeq: body.value.nextSeq });
    case 'reset':
      return validateFrame({ kind: 'reset', ...header, reason: body.value.reason });
    case 'heartbeat':
      return validateFrame({ kind: 'heartbeat', ...header });
    case 'handshake':
      return validateFrame({
        kind: 'handshake',
        ...header,
        payload: copyPayload ? copyBytes(body.value.payload) : body.value.payload,
      });
    case undefined:
      throw new FrameError('missing_body', 'frame has no body');
  }
}
