import { create, fromBinary, type MessageInitShape, toBinary } from '@bufbuild/protobuf';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { expectCodedError } from './__tests__/coded-error.js';
import { DataFrameEncoder, decodeFrame, encodeFrame, encodeFrameGeneric } from './codec.js';
import { FrameError, type FrameErrorCode } from './errors.js';
import {
  ackFrame,
  dataFrame,
  type Frame,
  handshakeFrame,
  heartbeatFrame,
  resetFrame,
  resumeFrame,
  validateFrame,
} from './frame.js';
import { RelayMessageFrameSchema } from './gen/relay.v1_pb.js';
import { MAX_FRAME_BYTES } from './limits.js';
import { peekHeader, streamIdOfKey } from './peek.js';

const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');
const unhex = (text: string): Uint8Array => new Uint8Array(Buffer.from(text.replace(/\s+/g, ''), 'hex'));

const expectFrameError = (fn: () => unknown, code: FrameErrorCode): void => expectCodedError(fn, FrameError, code);

type RawInit = MessageInitShape<typeof RelayMessageFrameSchema>;
/** Encodes a RelayMessageFrame straight through the schema, bypassing our validation. */
function raw(init: RawInit): Uint8Array {
  return toBinary(RelayMessageFrameSchema, create(RelayMessageFrameSchema, { version: 1, streamId: 's', ...init }));
}
const body = {
  data: (seq: number, segmentIndex: number, segmentCount: number, payload: Uint8Array) =>
    ({ case: 'data', value: { seq, segmentIndex, segmentCount, payload } }) as const,
  handshake: (payload: Uint8Array) => ({ case: 'handshake', value: { payload } }) as const,
  reset: (reason: string) => ({ case: 'reset', value: { reason } }) as const,
  resume: (nextSeq: number) => ({ case: 'resume', value: { nextSeq } }) as const,
};
const base = { streamId: 's', ack: 0, ackBits: 0 } as const;

describe('golden bytes (hand-computed protobuf)', () => {
  const cases: [string, Frame, string][] = [
    // version=1 (08 01), stream_id "s" (12 01 73), resume = field 7 empty message (3a 00): next_seq 0 adds nothing.
    ['resume next_seq 0', resumeFrame('s'), '0801 120173 3a00'],
    ['resume next_seq 5', resumeFrame('s', 5), '0801 120173 3a02 0805'],
    // data = field 5 (2a): seq 300 (08 ac02), segment_index 0 omitted, segment_count 1 (18 01), payload ff (22 01 ff).
    ['data seq 300', dataFrame('ab', 300, unhex('ff')), '0801 12026162 2a08 08ac02 1801 2201ff'],
    ['data seq 0', dataFrame('ab', 0, unhex('ff')), '0801 12026162 2a05 1801 2201ff'],
    ['ack', ackFrame('s'), '0801 120173 3200'],
    ['reset "x"', resetFrame('s', 'x'), '0801 120173 4203 0a0178'],
    ['heartbeat', heartbeatFrame('s'), '0801 120173 4a00'],
    ['handshake 0102', handshakeFrame('s', unhex('0102')), '0801 120173 5204 0a020102'],
    // traceparent = field 11 (5a), tracestate = field 12 (62), both after the body.
    [
      'heartbeat with trace context',
      heartbeatFrame('s', { traceparent: 't', tracestate: '' }),
      '0801 120173 4a00 5a0174 6200',
    ],
  ];
  it.each(cases)('%s', (_name, frame, expected) => {
    const bytes = encodeFrame(frame);
    expect(hex(bytes)).toBe(expected.replace(/\s+/g, ''));
    expect(decodeFrame(bytes)).toEqual(frame);
  });

  it('decodes non-zero ack header fields from codex builds that send them', () => {
    const frame = decodeFrame(unhex('0801 120173 1807 2003 4a00'));
    expect(frame).toEqual({ kind: 'heartbeat', streamId: 's', ack: 7, ackBits: 3 });
  });
});

describe('constructors', () => {
  it('build each body kind with zero ack fields', () => {
    expect(dataFrame('s', 1, unhex('01'))).toEqual({ kind: 'data', ...base, seq: 1, payload: unhex('01') });
    expect(ackFrame('s')).toEqual({ kind: 'ack', ...base });
    expect(resumeFrame('s')).toEqual({ kind: 'resume', ...base, nextSeq: 0 });
    expect(resetFrame('s', 'r')).toEqual({ kind: 'reset', ...base, reason: 'r' });
    expect(heartbeatFrame('s')).toEqual({ kind: 'heartbeat', ...base });
    expect(handshakeFrame('s', unhex('02'))).toEqual({ kind: 'handshake', ...base, payload: unhex('02') });
  });

  it('refuse frames the receiver would reject', () => {
    expectFrameError(() => dataFrame('s', 0, new Uint8Array()), 'invalid_data');
    expectFrameError(() => dataFrame('s', -1, unhex('01')), 'invalid_data');
    expectFrameError(() => dataFrame('s', 2 ** 32, unhex('01')), 'invalid_data');
    expectFrameError(() => dataFrame('s', 1.5, unhex('01')), 'invalid_data');
    expectFrameError(() => handshakeFrame('s', new Uint8Array()), 'invalid_handshake');
    expectFrameError(() => resetFrame('s', ''), 'invalid_reset');
    expectFrameError(() => resetFrame('s', 'x'.repeat(257)), 'invalid_reset');
    expectFrameError(() => resetFrame('s', '\ud800'), 'invalid_reset');
    expectFrameError(() => resumeFrame('s', 2 ** 32), 'invalid_resume');
    expectFrameError(() => heartbeatFrame(' s'), 'invalid_stream_id');
    expectFrameError(() => heartbeatFrame('s', { traceparent: '\udc00' }), 'invalid_header');
    expectFrameError(() => validateFrame({ kind: 'ack', streamId: 's', ack: -1, ackBits: 0 }), 'invalid_header');
    expectFrameError(() => validateFrame({ kind: 'ack', streamId: 's', ack: 0, ackBits: 2 ** 32 }), 'invalid_header');
  });

  it('accepts a reset reason of exactly 256 bytes, counted in UTF-8', () => {
    expect(resetFrame('s', 'x'.repeat(256)).reason).toHaveLength(256);
    expectFrameError(() => resetFrame('s', 'é'.repeat(129)), 'invalid_reset'); // 258 bytes, 129 chars
  });
});

describe('encodeFrame', () => {
  it("encodes Data frames on the fast path to exactly the generic encoder's bytes", () => {
    fc.assert(
      fc.property(
        fc.uuid(),
        fc.nat({ max: 0xffffffff }),
        fc.nat({ max: 0xffffffff }),
        fc.nat({ max: 0xffffffff }),
        fc.uint8Array({ minLength: 1, maxLength: 70_000 }),
        (streamId, seq, ack, ackBits, payload) => {
          const frame = { ...dataFrame(streamId, seq, payload), ack, ackBits };
          expect(encodeFrame(frame)).toEqual(encodeFrameGeneric(frame));
          expect(decodeFrame(encodeFrame(frame))).toMatchObject({ kind: 'data', seq, ack, ackBits, payload });
        },
      ),
      { numRuns: 200 },
    );
  });

  it('validates hand-built frames before encoding', () => {
    const bad = { kind: 'data', ...base, seq: 0, payload: new Uint8Array() } as const;
    expectFrameError(() => encodeFrame(bad), 'invalid_data');
  });

  it('refuses to produce a frame over the size limit', () => {
    const payload = new Uint8Array(MAX_FRAME_BYTES);
    expectFrameError(() => encodeFrame(dataFrame('s', 0, payload)), 'too_large');
    expectFrameError(() => encodeFrame(dataFrame('s', 0, new Uint8Array(100)), { maxBytes: 50 }), 'too_large');
  });
});

describe('DataFrameEncoder', () => {
  it('writes the golden bytes of a Data frame around the payload', () => {
    const frame = new DataFrameEncoder('s').allocate(300, 2);
    frame.payload.set([0x0a, 0x0b]);
    // version 1, stream_id "s", data { seq 300, segment_count 1, payload 0a0b }
    expect(hex(encodeFrame(frame))).toBe('0801120173' + '2a09' + '08ac02' + '1801' + '22020a0b');
    expect(frame).toEqual(dataFrame('s', 300, unhex('0a0b')));
  });

  it('refuses what dataFrame and encodeFrame refuse', () => {
    expectFrameError(() => new DataFrameEncoder(' padded'), 'invalid_stream_id');
    const encoder = new DataFrameEncoder('s');
    expectFrameError(() => encoder.allocate(-1, 1), 'invalid_data');
    expectFrameError(() => encoder.allocate(2 ** 32, 1), 'invalid_data');
    expectFrameError(() => encoder.allocate(0, 0), 'invalid_data');
    expectFrameError(() => encoder.allocate(0, MAX_FRAME_BYTES), 'too_large');
    expectFrameError(() => encodeFrame(encoder.allocate(0, 100), { maxBytes: 50 }), 'too_large');
  });
});

describe('decodeFrame validation (spec §3.3)', () => {
  const rejects: [string, Uint8Array, FrameErrorCode][] = [
    ['version 2', raw({ version: 2, body: body.resume(0) }), 'invalid_version'],
    ['version 0 (absent)', raw({ version: 0, body: body.resume(0) }), 'invalid_version'],
    ['empty stream_id', raw({ streamId: '', body: body.resume(0) }), 'invalid_stream_id'],
    ['blank stream_id', raw({ streamId: '   ', body: body.resume(0) }), 'invalid_stream_id'],
    ['leading whitespace', raw({ streamId: ' s', body: body.resume(0) }), 'invalid_stream_id'],
    ['trailing newline', raw({ streamId: 's\n', body: body.resume(0) }), 'invalid_stream_id'],
    ['129-byte stream_id', raw({ streamId: 'a'.repeat(129), body: body.resume(0) }), 'invalid_stream_id'],
    ['65 two-byte chars (130 B)', raw({ streamId: 'é'.repeat(65), body: body.resume(0) }), 'invalid_stream_id'],
    ['no body', raw({}), 'missing_body'],
    ['data segment_index 1', raw({ body: body.data(0, 1, 1, unhex('01')) }), 'invalid_data'],
    ['data segment_count 0', raw({ body: body.data(0, 0, 0, unhex('01')) }), 'invalid_data'],
    ['data segment_count 2', raw({ body: body.data(0, 0, 2, unhex('01')) }), 'invalid_data'],
    ['data empty payload', raw({ body: body.data(0, 0, 1, new Uint8Array()) }), 'invalid_data'],
    ['handshake empty payload', raw({ body: body.handshake(new Uint8Array()) }), 'invalid_handshake'],
    ['reset empty reason', raw({ body: body.reset('') }), 'invalid_reset'],
    ['reset 257-byte reason', raw({ body: body.reset('r'.repeat(257)) }), 'invalid_reset'],
    ['truncated', raw({ body: body.reset('reason') }).subarray(0, 9), 'malformed'],
    ['invalid UTF-8 stream_id', unhex('0801 1202c328 4a00'), 'malformed'],
    ['field number 0', unhex('0001'), 'malformed'],
  ];
  it.each(rejects)('rejects %s', (_name, bytes, code) => {
    expectFrameError(() => decodeFrame(bytes), code);
  });

  it('refuses a varint that runs past the end of the body, which fromBinary alone accepts', () => {
    // Resume body of length 2 = `08 80`: next_seq's varint is cut by the body's end; the `01` after it
    // belongs to the frame, where it is an illegal tag (field 0).
    const bytes = unhex('0801 120173 3a02 0880 01');
    expect(fromBinary(RelayMessageFrameSchema, bytes).body).toMatchObject({ case: 'resume', value: { nextSeq: 128 } });
    expectFrameError(() => decodeFrame(bytes), 'malformed');
    expect(peekStreamId(bytes)).toBeNull();
  });

  it('accepts the boundary values', () => {
    expect(decodeFrame(raw({ streamId: 'a'.repeat(128), body: body.resume(0) })).streamId).toHaveLength(128);
    expect(decodeFrame(raw({ streamId: 'é'.repeat(64), body: body.resume(0) })).streamId).toHaveLength(64);
    expect(decodeFrame(raw({ body: body.reset('r'.repeat(256)) }))).toMatchObject({ kind: 'reset' });
    expect(decodeFrame(raw({ streamId: 'a b', body: body.resume(0) })).streamId).toBe('a b');
  });

  it('tolerates unknown fields (appended field 13, varint and length-delimited)', () => {
    const known = encodeFrame(dataFrame('s', 3, unhex('0a0b')));
    const withUnknown = new Uint8Array([...known, 0x68, 0x05, 0x6a, 0x02, 0xde, 0xad]);
    expect(decodeFrame(withUnknown)).toEqual(dataFrame('s', 3, unhex('0a0b')));
    // Unknown fields inside a body message are skipped too (field 9 of RelayResume).
    expect(decodeFrame(unhex('0801 120173 3a04 0802 4801'))).toEqual(resumeFrame('s', 2));
  });

  it('copies payloads, so the frame does not alias the input buffer', () => {
    const bytes = encodeFrame(handshakeFrame('s', unhex('0102')));
    const frame = decodeFrame(bytes);
    bytes.fill(0);
    expect(frame).toEqual(handshakeFrame('s', unhex('0102')));
  });

  it('copies payloads out of a Node Buffer too (whose slice() would be a view), data and handshake', () => {
    for (const frame of [dataFrame('s', 7, unhex('0a0b0c')), handshakeFrame('s', unhex('0102'))]) {
      // As a socket hands it over: a Buffer view into a larger buffer about to be reused.
      const wire = Buffer.concat([Buffer.from('xx'), encodeFrame(frame)]).subarray(2);
      const decoded = decodeFrame(wire);
      wire.fill(0xee);
      expect(decoded).toEqual(frame);
    }
  });

  it('decodes the stream id of the bytes it is given, when one reused Buffer carries two streams in turn', () => {
    // As an inbound slab pool hands them out: stream A's frame in a Buffer, then stream B's frame of the
    // same length written over it. An id remembered as a view of the first would read as B's bytes now.
    const a = encodeFrame(dataFrame('stream-a', 1, unhex('0102')));
    const b = encodeFrame(dataFrame('stream-b', 1, unhex('0102')));
    expect(b.byteLength).toBe(a.byteLength);
    const slab = Buffer.allocUnsafe(a.byteLength + 8).subarray(4, 4 + a.byteLength);
    for (const copyPayload of [true, false]) {
      slab.set(a);
      expect(decodeFrame(slab, { copyPayload }).streamId).toBe('stream-a');
      slab.set(b);
      expect(decodeFrame(slab, { copyPayload }).streamId).toBe('stream-b');
      slab.set(a);
      expect(decodeFrame(slab, { copyPayload }).streamId).toBe('stream-a');
    }
  });

  it('with copyPayload: false, payloads are views into the input (data and handshake)', () => {
    for (const frame of [dataFrame('s', 7, unhex('0a0b0c')), handshakeFrame('s', unhex('0102'))]) {
      const bytes = encodeFrame(frame);
      const decoded = decodeFrame(bytes, { copyPayload: false }) as Extract<Frame, { payload: Uint8Array }>;
      expect(decoded).toEqual(frame);
      expect(decoded.payload.buffer).toBe(bytes.buffer);
    }
  });

  it('checks the size before parsing: a 10 MiB buffer of garbage is too_large, not malformed', () => {
    const huge = new Uint8Array(10 * 1024 * 1024).fill(0xff);
    expectFrameError(() => decodeFrame(huge), 'too_large');
    expect(peekStreamId(huge)).toBeNull(); // not a well-formed message either
  });

  it('honours maxBytes exactly', () => {
    const bytes = encodeFrame(handshakeFrame('s', new Uint8Array(40)));
    expect(decodeFrame(bytes, { maxBytes: bytes.byteLength }).kind).toBe('handshake');
    expectFrameError(() => decodeFrame(bytes, { maxBytes: bytes.byteLength - 1 }), 'too_large');
    const full = encodeFrame(dataFrame('s', 0, new Uint8Array(MAX_FRAME_BYTES - 16)));
    expect(full.byteLength).toBeLessThanOrEqual(MAX_FRAME_BYTES);
    expect(decodeFrame(full).kind).toBe('data');
  });
});

/** The stream id the one header peek (peek.ts) routes by, as text; null when it names none. */
function peekStreamId(bytes: Uint8Array): string | null {
  const peeked = peekHeader(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
  return peeked === null ? null : streamIdOfKey(peeked.streamKey);
}

describe('peekHeader against the codec', () => {
  it('reads the stream id of every body kind without decoding the body', () => {
    const id = 'b6a0f7c2-0b9e-4c55-9a1e-3f1d2c4b5a69';
    for (const frame of [
      dataFrame(id, 9, unhex('01')),
      ackFrame(id),
      resumeFrame(id),
      resetFrame(id, 'gone'),
      heartbeatFrame(id, { traceparent: 'x' }),
      handshakeFrame(id, unhex('02')),
    ]) {
      expect(peekStreamId(encodeFrame(frame))).toBe(id);
    }
  });

  it('does not validate the body: a frame with an empty data payload still routes', () => {
    expect(peekStreamId(raw({ streamId: 'r', body: body.data(0, 0, 1, new Uint8Array()) }))).toBe('r');
  });

  it('takes the last occurrence, like a full decode', () => {
    const bytes = unhex('120161 0801 120162 4a00');
    expect(peekStreamId(bytes)).toBe('b');
    expect(decodeFrame(bytes).streamId).toBe('b');
  });

  it('returns null for truncated, garbage, oversized or id-less input', () => {
    const bytes = encodeFrame(resumeFrame('stream-1'));
    for (let cut = 0; cut < 4 + 'stream-1'.length; cut += 1) {
      expect(peekStreamId(bytes.subarray(0, cut))).toBeNull();
    }
    // Truncated inside a later field: the message is not well-formed.
    expect(peekStreamId(bytes.subarray(0, bytes.byteLength - 1))).toBeNull();
    expect(peekStreamId(unhex('ffffffffffffffffffff'))).toBeNull();
    expect(peekStreamId(unhex('0f'))).toBeNull(); // wire type 7
    expect(peekStreamId(unhex('0801 4a00'))).toBeNull(); // no stream id
  });

  it("routes by the exact id bytes and leaves the id's rules to the endpoint (the relay forwards verbatim)", () => {
    // " s" (surrounding whitespace) and invalid UTF-8 are refused by decodeFrame at the endpoint, not by the peek.
    expect(peekHeader(Buffer.from(unhex('1202 2073 4a00')))).toEqual({ streamKey: ' s', kind: 'heartbeat' });
    expect(peekHeader(Buffer.from(unhex('1202 c328')))).toEqual({ streamKey: '\u00c3(', kind: null });
    // Size is the socket's limit (maxPayload), not the peek's: a frame of any length is read.
    const big = encodeFrame(dataFrame('s', 0, new Uint8Array(MAX_FRAME_BYTES - 16)));
    expect(peekHeader(Buffer.from(big))).toEqual({ streamKey: 's', kind: 'data' });
  });
});

describe('wire types of known fields', () => {
  // Found by mutation: a known field sent with another wire type. The protobuf library would read it
  // anyway (so decode named one stream while the relay's peek named none); prost refuses it.
  it.each([
    '090112083b747265616d2d312a09080318012203010203',
    '0901120873742d65616d2d312a09080318012203010203',
    '0801150873747265616d2d312a09080318012203010202',
  ])('refuses %s, and the peek agrees', (hex) => {
    const bytes = new Uint8Array(Buffer.from(hex, 'hex'));
    expect(() => decodeFrame(bytes)).toThrow(FrameError);
    expect(peekStreamId(bytes)).toBeNull();
  });

  it('refuses a Data body whose payload is not length-delimited', () => {
    // version 1, stream "s", data { payload: varint 5 }
    const bytes = new Uint8Array([0x08, 0x01, 0x12, 0x01, 0x73, 0x2a, 0x02, 0x20, 0x05]);
    expect(() => decodeFrame(bytes)).toThrow(FrameError);
  });
});

describe('over-long varints', () => {
  it('a frame with a varint over 10 bytes is refused, as prost refuses it and the relay’s peek does (fuzz seed 263551510)', () => {
    const heartbeat = encodeFrame(heartbeatFrame('00000000-0000-1000-8000-000000000000'));
    // Field 14 (unknown), wire type 0, then eleven continuation bytes and a last one.
    const tail = [0x70, ...Array(11).fill(0x80), 0x01];
    const bytes = new Uint8Array([...heartbeat, ...tail]);
    expect(() => decodeFrame(bytes)).toThrow(FrameError);
    expect(peekHeader(Buffer.from(bytes))).toBeNull();
    // Ten bytes is a varint: skipped as an unknown field.
    const ten = new Uint8Array([...heartbeat, 0x70, ...Array(9).fill(0x80), 0x01]);
    expect(decodeFrame(ten)).toMatchObject({ kind: 'heartbeat' });
  });
});
