import { create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { BinaryReader, BinaryWriter, WireType } from '@bufbuild/protobuf/wire';
import { FrameError } from './errors.js';
import type { DataFrame, Frame } from './frame.js';
import { isValidStreamId, validateFrame } from './frame.js';
import { type RelayMessageFrame, RelayMessageFrameSchema } from './gen/relay.v1_pb.js';
import { MAX_FRAME_BYTES, RELAY_PROTOCOL_VERSION } from './limits.js';

/** Field number of `RelayMessageFrame.stream_id`, the only field the relay reads. */
const STREAM_ID_FIELD = 2;
/** Field numbers of the `body` oneof (data … handshake). */
const FIRST_BODY_FIELD = 5;
const LAST_BODY_FIELD = 10;

export interface CodecOptions {
  /** Largest encoded frame accepted; defaults to the 256 KiB WebSocket message limit. */
  readonly maxBytes?: number;
}

type Body = RelayMessageFrame['body'];

function bodyOf(frame: Frame): Body {
  switch (frame.kind) {
    case 'data':
      // segment_index 0 is omitted on the wire; segment_count is always 1 (no relay-level segmentation).
      return {
        case: 'data',
        value: {
          $typeName: 'codex.exec_server.relay.v1.RelayData',
          seq: frame.seq,
          segmentIndex: 0,
          segmentCount: 1,
          payload: frame.payload,
        },
      };
    case 'ack':
      return { case: 'ackFrame', value: { $typeName: 'codex.exec_server.relay.v1.RelayAck' } };
    case 'resume':
      return { case: 'resume', value: { $typeName: 'codex.exec_server.relay.v1.RelayResume', nextSeq: frame.nextSeq } };
    case 'reset':
      return { case: 'reset', value: { $typeName: 'codex.exec_server.relay.v1.RelayReset', reason: frame.reason } };
    case 'heartbeat':
      return { case: 'heartbeat', value: { $typeName: 'codex.exec_server.relay.v1.RelayHeartbeat' } };
    case 'handshake':
      return {
        case: 'handshake',
        value: { $typeName: 'codex.exec_server.relay.v1.RelayHandshake', payload: frame.payload },
      };
  }
}

/**
 * Encodes a frame as one protobuf `RelayMessageFrame` (one WebSocket binary message). Validates first,
 * as the receiver would, and refuses a result larger than `maxBytes`: an invalid frame never leaves.
 */
export function encodeFrame(frame: Frame, options: CodecOptions = {}): Uint8Array {
  validateFrame(frame);
  const bytes =
    frame.kind === 'data' && frame.traceparent === undefined && frame.tracestate === undefined
      ? encodeDataFrame(frame)
      : encodeGeneric(frame);
  const maxBytes = options.maxBytes ?? MAX_FRAME_BYTES;
  if (bytes.byteLength > maxBytes) {
    throw new FrameError('too_large', `encoded frame is ${bytes.byteLength} bytes, over the ${maxBytes}-byte limit`);
  }
  return bytes;
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
  const message = create(RelayMessageFrameSchema, {
    version: RELAY_PROTOCOL_VERSION,
    streamId: frame.streamId,
    ack: frame.ack,
    ackBits: frame.ackBits,
    body: bodyOf(frame),
    ...(frame.traceparent !== undefined && { traceparent: frame.traceparent }),
    ...(frame.tracestate !== undefined && { tracestate: frame.tracestate }),
  });
  try {
    return toBinary(RelayMessageFrameSchema, message);
  } catch (cause) {
    throw new FrameError('malformed', 'frame could not be encoded', { cause });
  }
}

/** The generic (reflection) encoder for any frame; exported for the test that pins the fast path to it. */
export { encodeGeneric as encodeFrameGeneric };

/**
 * Walks the fields of one message with a reader bounded by exactly its bytes, calling `visit` for each
 * field (which must consume it) or skipping it. Throws the library's error on any malformed tag,
 * truncated value or unbalanced group.
 */
function walkFields(bytes: Uint8Array, visit?: (fieldNo: number, wireType: WireType, reader: BinaryReader) => boolean) {
  const reader = new BinaryReader(bytes);
  while (reader.pos < reader.len) {
    const [fieldNo, wireType] = reader.tag();
    if (!visit?.(fieldNo, wireType, reader)) reader.skip(wireType, fieldNo);
  }
}

/**
 * Structural check run before `fromBinary`: the frame and its body message must each be well-formed
 * within their own bounds. `fromBinary` reads a sub-message with a reader over the whole frame, so it
 * lets a varint run past the end of the body and accepts bytes a strict decoder (codex's prost) refuses.
 */
function checkWellFormed(bytes: Uint8Array): void {
  walkFields(bytes, (fieldNo, wireType, reader) => {
    if (fieldNo < FIRST_BODY_FIELD || fieldNo > LAST_BODY_FIELD || wireType !== WireType.LengthDelimited) return false;
    walkFields(reader.bytes());
    return true;
  });
}

function checkSize(bytes: Uint8Array, maxBytes: number): void {
  if (bytes.byteLength > maxBytes) {
    throw new FrameError('too_large', `frame is ${bytes.byteLength} bytes, over the ${maxBytes}-byte limit`);
  }
}

/**
 * Decodes and validates one frame (spec §3.3). The size is checked before parsing; unknown fields are
 * skipped (newer senders add some); missing scalars default to 0 / "". Payloads are copied, so the
 * result never aliases `bytes`. Throws only `FrameError`.
 */
export function decodeFrame(bytes: Uint8Array, options: CodecOptions = {}): Frame {
  checkSize(bytes, options.maxBytes ?? MAX_FRAME_BYTES);
  let message: RelayMessageFrame;
  try {
    checkWellFormed(bytes);
    message = fromBinary(RelayMessageFrameSchema, bytes, { readUnknownFields: false });
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
      return validateFrame({ kind: 'data', ...header, seq: body.value.seq, payload: body.value.payload.slice() });
    case 'ackFrame':
      return validateFrame({ kind: 'ack', ...header });
    case 'resume':
      return validateFrame({ kind: 'resume', ...header, nextSeq: body.value.nextSeq });
    case 'reset':
      return validateFrame({ kind: 'reset', ...header, reason: body.value.reason });
    case 'heartbeat':
      return validateFrame({ kind: 'heartbeat', ...header });
    case 'handshake':
      return validateFrame({ kind: 'handshake', ...header, payload: body.value.payload.slice() });
    case undefined:
      throw new FrameError('missing_body', 'frame has no body');
  }
}

/**
 * The relay's cheap routing read: the `stream_id` of an encoded frame, without decoding bodies or
 * copying payloads (the wire reader skips them). Like a full decode, the last occurrence of the field
 * wins. Returns null when the bytes are over `maxBytes`, are not a well-formed protobuf message, or
 * carry no valid stream id; it never throws.
 */
export function peekStreamId(bytes: Uint8Array, options: CodecOptions = {}): string | null {
  if (bytes.byteLength > (options.maxBytes ?? MAX_FRAME_BYTES)) return null;
  let streamId: string | null = null;
  try {
    walkFields(bytes, (fieldNo, wireType, reader) => {
      if (fieldNo !== STREAM_ID_FIELD || wireType !== WireType.LengthDelimited) return false;
      streamId = reader.string(true); // strict: invalid UTF-8 throws, as in decodeFrame
      return true;
    });
  } catch {
    return null;
  }
  return streamId !== null && isValidStreamId(streamId) ? streamId : null;
}
