/**
 * `RelayMessageFrame` (relay.v1.proto) read and written field by field with protobuf-es's wire reader and
 * writer, without its reflection runtime: loading the generated schema builds protobuf-es's descriptor
 * registry, about two thirds of the time the SDK's dialing code takes to load (≈ 12 ms of every cold
 * `harness exec`), for one small message. The generated schema stays the reference: the tests check these
 * bytes against `toBinary` and these values against `fromBinary` on encoded, mutated and random input.
 *
 * proto3 as protobuf-es applies it: a missing scalar is 0 / "" / empty bytes; the last occurrence of a
 * scalar wins; `body` is a oneof whose repeated case merges field by field into the value read so far and
 * whose other case replaces it; strings must be valid UTF-8; unknown fields are skipped. Reading assumes
 * the structural check of codec.ts ran first (every field within its message, known fields with their
 * own wire types), as fromBinary's reads do there.
 */
import { BinaryReader, BinaryWriter, WireType } from '@bufbuild/protobuf/wire';

export interface RelayDataFields {
  seq: number;
  segmentIndex: number;
  segmentCount: number;
  payload: Uint8Array;
}

/** The oneof `body`, with protobuf-es's case names. */
export type RelayBody =
  | { case: 'data'; value: RelayDataFields }
  | { case: 'ackFrame'; value: Record<string, never> }
  | { case: 'resume'; value: { nextSeq: number } }
  | { case: 'reset'; value: { reason: string } }
  | { case: 'heartbeat'; value: Record<string, never> }
  | { case: 'handshake'; value: { payload: Uint8Array } }
  | { case: undefined; value?: undefined };

export interface RelayMessage {
  version: number;
  streamId: string;
  ack: number;
  ackBits: number;
  body: RelayBody;
  traceparent?: string;
  tracestate?: string;
}

/** protobuf-es's recursion budget (100) less the depth of the message being read, for skipping groups. */
const SKIP_BUDGET_FRAME = 99;
const SKIP_BUDGET_BODY = 98;

const BODY_CASES = {
  5: 'data',
  6: 'ackFrame',
  7: 'resume',
  8: 'reset',
  9: 'heartbeat',
  10: 'handshake',
} as const;
type BodyField = keyof typeof BODY_CASES;

function isBodyField(fieldNo: number): fieldNo is BodyField {
  return fieldNo >= 5 && fieldNo <= 10;
}

/** Decodes one message (see the module comment for the rules); throws the wire reader's errors. */
export function readRelayMessage(bytes: Uint8Array): RelayMessage {
  const reader = new BinaryReader(bytes);
  const message: RelayMessage = { version: 0, streamId: '', ack: 0, ackBits: 0, body: { case: undefined } };
  while (reader.pos < reader.len) {
    const [fieldNo, wireType] = reader.tag();
    switch (fieldNo) {
      case 1:
        message.version = reader.uint32();
        break;
      case 2:
        message.streamId = reader.string(true);
        break;
      case 3:
        message.ack = reader.uint32();
        break;
      case 4:
        message.ackBits = reader.uint32();
        break;
      case 11:
        message.traceparent = reader.string(true);
        break;
      case 12:
        message.tracestate = reader.string(true);
        break;
      default:
        if (isBodyField(fieldNo)) message.body = readBody(fieldNo, reader.bytes(), message.body);
        else reader.skip(wireType, fieldNo, SKIP_BUDGET_FRAME);
    }
  }
  return message;
}

function readBody(fieldNo: BodyField, bytes: Uint8Array, previous: RelayBody): RelayBody {
  const name = BODY_CASES[fieldNo];
  // The same case again merges into the value read so far; another case starts from the defaults.
  const body = (previous.case === name ? { case: name, value: { ...previous.value } } : emptyBody(name)) as RelayBody;
  const reader = new BinaryReader(bytes);
  while (reader.pos < reader.len) {
    const [innerNo, wireType] = reader.tag();
    if (!readBodyField(body, innerNo, reader)) reader.skip(wireType, innerNo, SKIP_BUDGET_BODY);
  }
  return body;
}

function emptyBody(name: (typeof BODY_CASES)[BodyField]): RelayBody {
  switch (name) {
    case 'data':
      return { case: name, value: { seq: 0, segmentIndex: 0, segmentCount: 0, payload: new Uint8Array(0) } };
    case 'resume':
      return { case: name, value: { nextSeq: 0 } };
    case 'reset':
      return { case: name, value: { reason: '' } };
    case 'handshake':
      return { case: name, value: { payload: new Uint8Array(0) } };
    case 'ackFrame':
    case 'heartbeat':
      return { case: name, value: {} };
  }
}

/** Reads field `no` of the body into it; false for a field the body does not have (skipped). */
function readBodyField(body: RelayBody, no: number, reader: BinaryReader): boolean {
  switch (body.case) {
    case 'data':
      if (no === 1) body.value.seq = reader.uint32();
      else if (no === 2) body.value.segmentIndex = reader.uint32();
      else if (no === 3) body.value.segmentCount = reader.uint32();
      else if (no === 4) body.value.payload = reader.bytes();
      else return false;
      return true;
    case 'resume':
      if (no !== 1) return false;
      body.value.nextSeq = reader.uint32();
      return true;
    case 'reset':
      if (no !== 1) return false;
      body.value.reason = reader.string(true);
      return true;
    case 'handshake':
      if (no !== 1) return false;
      body.value.payload = reader.bytes();
      return true;
    default:
      return false;
  }
}

const V = WireType.Varint;
const L = WireType.LengthDelimited;

/** Encodes one message as `toBinary` does: fields in number order, proto3 defaults left out. */
export function writeRelayMessage(message: RelayMessage): Uint8Array {
  const writer = new BinaryWriter();
  if (message.version !== 0) writer.tag(1, V).uint32(message.version);
  if (message.streamId !== '') writer.tag(2, L).string(message.streamId);
  if (message.ack !== 0) writer.tag(3, V).uint32(message.ack);
  if (message.ackBits !== 0) writer.tag(4, V).uint32(message.ackBits);
  const body = message.body;
  switch (body.case) {
    case 'data':
      writer.tag(5, L).fork();
      if (body.value.seq !== 0) writer.tag(1, V).uint32(body.value.seq);
      if (body.value.segmentIndex !== 0) writer.tag(2, V).uint32(body.value.segmentIndex);
      if (body.value.segmentCount !== 0) writer.tag(3, V).uint32(body.value.segmentCount);
      if (body.value.payload.byteLength !== 0) writer.tag(4, L).bytes(body.value.payload);
      writer.join();
      break;
    case 'ackFrame':
      writer.tag(6, L).bytes(new Uint8Array(0));
      break;
    case 'resume':
      writer.tag(7, L).fork();
      if (body.value.nextSeq !== 0) writer.tag(1, V).uint32(body.value.nextSeq);
      writer.join();
      break;
    case 'reset':
      writer.tag(8, L).fork();
      if (body.value.reason !== '') writer.tag(1, L).string(body.value.reason);
      writer.join();
      break;
    case 'heartbeat':
      writer.tag(9, L).bytes(new Uint8Array(0));
      break;
    case 'handshake':
      writer.tag(10, L).fork();
      if (body.value.payload.byteLength !== 0) writer.tag(1, L).bytes(body.value.payload);
      writer.join();
      break;
    case undefined:
      break;
  }
  if (message.traceparent !== undefined) writer.tag(11, L).string(message.traceparent);
  if (message.tracestate !== undefined) writer.tag(12, L).string(message.tracestate);
  return writer.finish();
}
