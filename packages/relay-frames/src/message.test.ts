import { create, fromBinary, type MessageInitShape, toBinary } from '@bufbuild/protobuf';
import { BinaryWriter, WireType } from '@bufbuild/protobuf/wire';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { RelayMessageFrameSchema } from './gen/relay.v1_pb.js';
import { type RelayBody, type RelayMessage, readRelayMessage, writeRelayMessage } from './message.js';

// The generated schema and protobuf-es's reflection are the reference for the hand-written codec.

type Init = MessageInitShape<typeof RelayMessageFrameSchema>;

const u32 = fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 300 }), fc.integer({ min: 0, max: 0xffff_ffff }));
const text = fc.oneof(fc.constant(''), fc.string({ maxLength: 20 }), fc.string({ unit: 'grapheme', maxLength: 8 }));
const bytes = fc.uint8Array({ maxLength: 40 });

const body: fc.Arbitrary<RelayBody> = fc.oneof(
  fc.record({
    case: fc.constant('data' as const),
    value: fc.record({ seq: u32, segmentIndex: u32, segmentCount: u32, payload: bytes }),
  }),
  fc.constant({ case: 'ackFrame' as const, value: {} }),
  fc.record({ case: fc.constant('resume' as const), value: fc.record({ nextSeq: u32 }) }),
  fc.record({ case: fc.constant('reset' as const), value: fc.record({ reason: text }) }),
  fc.constant({ case: 'heartbeat' as const, value: {} }),
  fc.record({ case: fc.constant('handshake' as const), value: fc.record({ payload: bytes }) }),
  fc.constant({ case: undefined }),
);

const message: fc.Arbitrary<RelayMessage> = fc.record(
  {
    version: u32,
    streamId: text,
    ack: u32,
    ackBits: u32,
    body,
    traceparent: text,
    tracestate: text,
  },
  { requiredKeys: ['version', 'streamId', 'ack', 'ackBits', 'body'] },
);

function reference(value: RelayMessage): Uint8Array {
  return toBinary(RelayMessageFrameSchema, create(RelayMessageFrameSchema, value as Init));
}

/** fromBinary's answer as plain data (no $typeName, no unknown fields), or the fact that it threw. */
function referenceRead(input: Uint8Array): unknown {
  let decoded: ReturnType<typeof fromBinary<typeof RelayMessageFrameSchema>>;
  try {
    decoded = fromBinary(RelayMessageFrameSchema, input, { readUnknownFields: false });
  } catch {
    return 'throws';
  }
  return plain(decoded);
}

function ownRead(input: Uint8Array): unknown {
  try {
    return plain(readRelayMessage(input));
  } catch {
    return 'throws';
  }
}

function plain(value: unknown): unknown {
  if (value instanceof Uint8Array) return [...value];
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const [key, field] of Object.entries(value)) {
    if (key === '$typeName' || key === '$unknown' || field === undefined) continue;
    out[key] = plain(field);
  }
  return out;
}

/** An unknown field of each wire type (numbers the schema does not use, in the frame or a body). */
const unknownField = fc.record({ no: fc.integer({ min: 13, max: 60 }), kind: fc.integer({ min: 0, max: 3 }), n: u32 });
function withUnknown(encoded: Uint8Array, field: { no: number; kind: number; n: number }): Uint8Array {
  const writer = new BinaryWriter();
  writer.raw(encoded);
  if (field.kind === 0) writer.tag(field.no, WireType.Varint).uint32(field.n);
  else if (field.kind === 1) writer.tag(field.no, WireType.Bit32).fixed32(field.n);
  else if (field.kind === 2) writer.tag(field.no, WireType.Bit64).fixed64(field.n);
  else writer.tag(field.no, WireType.LengthDelimited).string(String(field.n));
  return writer.finish();
}

describe('RelayMessageFrame without reflection (message.ts)', () => {
  it('writes the bytes toBinary writes, for any message', () => {
    fc.assert(
      fc.property(message, (value) => {
        expect(writeRelayMessage(value)).toEqual(reference(value));
      }),
      { numRuns: 2000 },
    );
  });

  it('reads what fromBinary reads: encoded messages, with unknown fields, and concatenations (merges)', () => {
    fc.assert(
      fc.property(message, message, unknownField, (first, second, unknown) => {
        const a = reference(first);
        const b = reference(second);
        for (const input of [
          a,
          withUnknown(a, unknown),
          Buffer.concat([a, b]),
          Buffer.concat([withUnknown(b, unknown), a]),
        ]) {
          expect(ownRead(input)).toEqual(referenceRead(input));
        }
      }),
      { numRuns: 2000 },
    );
  });

  it('agrees with fromBinary on strings that are not UTF-8: both refuse them', () => {
    const badUtf8 = new Uint8Array([0xc3, 0x28]);
    for (const field of [2, 11, 12]) {
      const writer = new BinaryWriter();
      writer.tag(field, WireType.LengthDelimited).bytes(badUtf8);
      const input = writer.finish();
      expect(ownRead(input)).toBe('throws');
      expect(referenceRead(input)).toBe('throws');
    }
    const reset = new BinaryWriter();
    reset.tag(8, WireType.LengthDelimited).fork().tag(1, WireType.LengthDelimited).bytes(badUtf8).join();
    const input = reset.finish();
    expect(ownRead(input)).toBe('throws');
    expect(referenceRead(input)).toBe('throws');
  });

  it('keeps the last value of a repeated body field and of a repeated case, replaced by another case', () => {
    const input = Buffer.concat([
      reference({
        version: 1,
        streamId: 's',
        ack: 0,
        ackBits: 0,
        body: { case: 'data', value: { seq: 5, segmentIndex: 0, segmentCount: 1, payload: new Uint8Array([1]) } },
      }),
      reference({
        version: 0,
        streamId: '',
        ack: 0,
        ackBits: 0,
        body: { case: 'data', value: { seq: 0, segmentIndex: 2, segmentCount: 0, payload: new Uint8Array(0) } },
      }),
    ]);
    // Merged: seq 5 and the payload from the first, segment_index from the second.
    expect(plain(readRelayMessage(input))).toEqual({
      version: 1,
      streamId: 's',
      ack: 0,
      ackBits: 0,
      body: { case: 'data', value: { seq: 5, segmentIndex: 2, segmentCount: 1, payload: [1] } },
    });
    expect(ownRead(input)).toEqual(referenceRead(input));
    const replaced = Buffer.concat([
      input,
      reference({ version: 0, streamId: '', ack: 0, ackBits: 0, body: { case: 'resume', value: { nextSeq: 9 } } }),
    ]);
    expect(plain(readRelayMessage(replaced).body)).toEqual({ case: 'resume', value: { nextSeq: 9 } });
    expect(ownRead(replaced)).toEqual(referenceRead(replaced));
  });
});
