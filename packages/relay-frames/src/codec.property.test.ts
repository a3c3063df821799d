import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DataFrameEncoder, decodeFrame, decodeFrameGeneric, encodeFrame, encodeFrameGeneric } from './codec.js';
import { FrameError } from './errors.js';
import { dataFrame, type Frame, type FrameHeader, isValidStreamId } from './frame.js';
import { MAX_FRAME_BYTES, MAX_RESET_REASON_BYTES, MAX_SEQ } from './limits.js';
import { peekHeader, streamKey } from './peek.js';

/** The one header peek (peek.ts) over these bytes. */
const peek = (bytes: Uint8Array) => peekHeader(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));

const u32 = fc.integer({ min: 0, max: MAX_SEQ });
const text = fc.string({ unit: 'binary', maxLength: 40 });
const streamId = fc.oneof(fc.uuid(), text.filter(isValidStreamId));
const nonEmptyBytes = fc.uint8Array({ minLength: 1, maxLength: 2048 });
const resetReason = fc
  .string({ unit: 'binary', minLength: 1, maxLength: 80 })
  .filter((s) => Buffer.byteLength(s, 'utf8') <= MAX_RESET_REASON_BYTES);

const header: fc.Arbitrary<FrameHeader> = fc
  .record({
    streamId,
    ack: u32,
    ackBits: u32,
    traceparent: fc.option(text, { nil: undefined }),
    tracestate: fc.option(text, { nil: undefined }),
  })
  .map(({ traceparent, tracestate, ...rest }) => ({
    ...rest,
    ...(traceparent !== undefined && { traceparent }),
    ...(tracestate !== undefined && { tracestate }),
  }));

const frame: fc.Arbitrary<Frame> = fc.oneof(
  fc.tuple(header, u32, nonEmptyBytes).map(([h, seq, payload]): Frame => ({ kind: 'data', ...h, seq, payload })),
  header.map((h): Frame => ({ kind: 'ack', ...h })),
  fc.tuple(header, u32).map(([h, nextSeq]): Frame => ({ kind: 'resume', ...h, nextSeq })),
  fc.tuple(header, resetReason).map(([h, reason]): Frame => ({ kind: 'reset', ...h, reason })),
  header.map((h): Frame => ({ kind: 'heartbeat', ...h })),
  fc.tuple(header, nonEmptyBytes).map(([h, payload]): Frame => ({ kind: 'handshake', ...h, payload })),
);

/** The stream's own Data frames: no ack fields, no trace context (what the canonical decode path reads). */
const canonicalData: fc.Arbitrary<Frame> = fc
  .tuple(streamId, fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 300 }), u32), nonEmptyBytes)
  .map(([id, seq, payload]) => dataFrame(id, seq, payload));

/** One mutation of encoded bytes: flip bits of a byte, cut the rest off, or insert a byte. */
const edit = fc.oneof(
  fc.record({ op: fc.constant('flip' as const), at: fc.nat(), value: fc.integer({ min: 1, max: 255 }) }),
  fc.record({ op: fc.constant('cut' as const), at: fc.nat(), value: fc.constant(0) }),
  fc.record({ op: fc.constant('insert' as const), at: fc.nat(), value: fc.integer({ min: 0, max: 255 }) }),
);
type Edit = typeof edit extends fc.Arbitrary<infer E> ? E : never;

/** `encoded` with `edits` applied in turn, each at the index `indexOf` makes of its `at` and the current length. */
function applyEdits(
  encoded: Uint8Array,
  edits: readonly Edit[],
  indexOf: (at: number, length: number) => number,
): Uint8Array {
  let bytes = Array.from(encoded);
  for (const { op, at, value } of edits) {
    const i = indexOf(at, bytes.length);
    if (op === 'flip' && i < bytes.length) bytes[i] = bytes[i]! ^ value;
    if (op === 'cut') bytes = bytes.slice(0, i);
    if (op === 'insert') bytes.splice(i, 0, value);
  }
  return new Uint8Array(bytes);
}

function decodeOrError(decode: () => Frame): Frame | FrameError {
  try {
    return decode();
  } catch (error) {
    expect(error).toBeInstanceOf(FrameError);
    expect((error as FrameError).name).toBe('FrameError');
    return error as FrameError;
  }
}

/** The decoder (with its canonical Data-frame fast path, copying or not) agrees with the generic one. */
function checkAgainstGeneric(bytes: Uint8Array): Frame | FrameError {
  const result = decodeOrError(() => decodeFrame(bytes));
  const generic = decodeOrError(() => decodeFrameGeneric(bytes));
  const aliased = decodeOrError(() => decodeFrame(bytes, { copyPayload: false }));
  if (result instanceof FrameError) {
    expect(generic).toBeInstanceOf(FrameError);
    expect(aliased).toBeInstanceOf(FrameError);
  } else {
    expect(result).toEqual(generic);
    expect(aliased).toEqual(generic);
  }
  return result;
}

/**
 * Decoding either succeeds or throws a FrameError, as the generic decoder does; the header peek never
 * throws and, where the frame decodes, names its stream and kind.
 */
function checkDecoders(bytes: Uint8Array): void {
  const result = checkAgainstGeneric(bytes);
  const decoded = result instanceof FrameError ? undefined : result;
  const peeked = peek(bytes);
  if (decoded) {
    expect(peeked).toEqual({ streamKey: streamKey(decoded.streamId), kind: decoded.kind });
    // What decodes re-encodes and decodes to the same frame.
    expect(decodeFrame(encodeFrame(decoded))).toEqual(decoded);
  }
}

describe('codec properties', () => {
  it('arbitrary frames round-trip, and the relay peeks the same stream id', () => {
    fc.assert(
      fc.property(frame, (f) => {
        const bytes = encodeFrame(f);
        expect(bytes.byteLength).toBeLessThanOrEqual(MAX_FRAME_BYTES);
        expect(decodeFrame(bytes)).toEqual(f);
        expect(peek(bytes)).toEqual({ streamKey: streamKey(f.streamId), kind: f.kind });
        expect(encodeFrame(decodeFrame(bytes))).toEqual(bytes);
      }),
      { numRuns: 2_000 },
    );
  });

  it("Data frames built around their payload encode to exactly the generic encoder's bytes, with no copy", () => {
    fc.assert(
      fc.property(streamId, u32, fc.uint8Array({ minLength: 1, maxLength: 70_000 }), (id, seq, payload) => {
        const frame = new DataFrameEncoder(id).allocate(seq, payload.byteLength);
        expect(Object.isFrozen(frame)).toBe(true);
        frame.payload.set(payload);
        const bytes = encodeFrame(frame);
        expect(bytes).toEqual(encodeFrameGeneric(dataFrame(id, seq, payload)));
        expect(bytes.buffer).toBe(frame.payload.buffer); // the payload is a view into the wire bytes
        expect(decodeFrame(bytes)).toEqual(dataFrame(id, seq, payload));
      }),
      { numRuns: 500 },
    );
  });

  it('canonical Data frames decode as the generic decoder does, also mutated (flips, cuts, inserts)', () => {
    fc.assert(
      fc.property(canonicalData, fc.array(edit, { maxLength: 3 }), (f, edits) => {
        // Mutations land in the header (the first 60 bytes) most of the time, where the parsing is.
        const nearHeader = (at: number, length: number) => at % Math.min(length + 1, at % 4 === 0 ? length + 1 : 60);
        checkAgainstGeneric(applyEdits(encodeFrame(f), edits, nearHeader));
      }),
      { numRuns: 20_000 },
    );
  });

  it('fuzz: random bytes never make the decoders throw anything but FrameError', () => {
    fc.assert(fc.property(fc.uint8Array({ maxLength: 300 }), checkDecoders), { numRuns: 20_000 });
  });

  it('fuzz: mutated valid frames (flips, cuts, inserts) are decoded or refused with FrameError', () => {
    fc.assert(
      fc.property(frame, fc.array(edit, { minLength: 1, maxLength: 4 }), (f, edits) => {
        checkDecoders(applyEdits(encodeFrame(f), edits, (at, length) => at % (length + 1)));
      }),
      { numRuns: 10_000 },
    );
  });

  it('fuzz: any input over maxBytes is refused as too_large before parsing', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 1, maxLength: 200 }), (bytes) => {
        const maxBytes = bytes.byteLength - 1;
        expect(() => decodeFrame(bytes, { maxBytes })).toThrow(expect.objectContaining({ code: 'too_large' }));
      }),
      { numRuns: 2_000 },
    );
  });

  it('deeply nested unknown groups are refused, not a stack overflow', () => {
    // Field 13 start-group tags (0x6b) nested 100 000 deep.
    const bytes = new Uint8Array([0x08, 0x01, 0x12, 0x01, 0x73, ...new Uint8Array(100_000).fill(0x6b)]);
    expect(() => decodeFrame(bytes)).toThrow(expect.objectContaining({ name: 'FrameError', code: 'malformed' }));
    expect(peek(bytes)).toBeNull();
  });
});
