import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  ackFrame,
  dataFrame,
  decodeFrame,
  encodeFrame,
  type Frame,
  handshakeFrame,
  heartbeatFrame,
  isValidStreamId,
  peekHeader,
  peekHeaderParts,
  resetFrame,
  resumeFrame,
  streamKey,
} from './index.js';

// The relay's header peek against hostile frames (issue 16): it never throws, reads the same header from a
// message in any number of parts, and never routes a frame by a stream id other than the one the endpoint
// decodes. Runs per property: TETHER_FUZZ_RUNS (`pnpm fuzz` raises it); a failure prints the seed.
const numRuns = Number(process.env.TETHER_FUZZ_RUNS) || 300;
// TETHER_FUZZ_SEED replays a failure's printed seed.
if (process.env.TETHER_FUZZ_SEED) fc.configureGlobal({ seed: Number(process.env.TETHER_FUZZ_SEED) });

const buf = (bytes: Uint8Array) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);

const streamId = fc.oneof(
  fc.uuid(),
  fc.string({ unit: 'binary', minLength: 1, maxLength: 40 }).filter(isValidStreamId),
);
const frame: fc.Arbitrary<Frame> = fc
  .tuple(streamId, fc.nat(), fc.uint8Array({ minLength: 1, maxLength: 300 }), fc.integer({ min: 0, max: 5 }))
  .map(([id, seq, payload, which]) => {
    switch (which) {
      case 0:
        return dataFrame(id, seq, payload);
      case 1:
        return ackFrame(id);
      case 2:
        return resumeFrame(id, seq);
      case 3:
        return resetFrame(id, 'reason');
      case 4:
        return heartbeatFrame(id);
      default:
        return handshakeFrame(id, payload);
    }
  });

/** Flips, cuts and inserts at arbitrary places: the bytes a broken or hostile peer sends. */
const mutated = fc
  .tuple(frame, fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 2 }), fc.uint8Array({ maxLength: 3 }))))
  .map(([f, edits]) => {
    let bytes = Buffer.from(encodeFrame(f));
    for (const [at, op, insert] of edits) {
      const i = at % (bytes.length + 1);
      if (op === 0 && i < bytes.length) bytes[i] = (bytes[i] as number) ^ (insert[0] ?? 0xff);
      else if (op === 1) bytes = bytes.subarray(0, i);
      else bytes = Buffer.concat([bytes.subarray(0, i), insert, bytes.subarray(i)]);
    }
    return bytes;
  });

/** The message as consecutive views cut at the given points, as a socket may deliver it. */
function parts(bytes: Buffer, cuts: number[]): Buffer[] {
  const points = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
  const out: Buffer[] = [];
  let from = 0;
  for (const point of [...points, bytes.length]) {
    out.push(bytes.subarray(from, point));
    from = point;
  }
  return out;
}

/** Two frames back to back: one protobuf message by merge rules (the later stream id and body win). */
const concatenated = fc.tuple(frame, frame, fc.nat()).map(([a, b, cut]) => {
  const first = Buffer.from(encodeFrame(a));
  return Buffer.concat([first.subarray(0, cut % (first.length + 1) || first.length), encodeFrame(b)]);
});

function decodeOrNull(bytes: Buffer): Frame | null {
  try {
    return decodeFrame(bytes);
  } catch {
    return null;
  }
}

describe('fuzz: relay header peek', () => {
  it('never throws on arbitrary bytes, and reads the same header from any split of them', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.uint8Array({ maxLength: 200 }).map(buf), mutated),
        fc.array(fc.nat(), { maxLength: 6 }),
        (bytes, cuts) => {
          const whole = peekHeader(bytes);
          expect(peekHeaderParts(parts(bytes, cuts), bytes.length)).toEqual(whole);
          if (whole !== null) expect(Buffer.from(whole.streamKey, 'latin1').length).toBeLessThanOrEqual(128);
        },
      ),
      { numRuns },
    );
  });

  it('reads the stream id and kind of every well-formed frame', () => {
    fc.assert(
      fc.property(frame, (f) => {
        expect(peekHeader(buf(encodeFrame(f)))).toEqual({ streamKey: streamKey(f.streamId), kind: f.kind });
      }),
      { numRuns },
    );
  });

  it('never names another stream than the one the endpoint decodes, however the frame is mangled', () => {
    fc.assert(
      fc.property(fc.oneof(mutated, concatenated), (bytes) => {
        const decoded = decodeOrNull(bytes);
        const peeked = peekHeader(bytes);
        if (decoded !== null && peeked !== null) {
          expect(peeked.streamKey).toBe(streamKey(decoded.streamId));
          expect(peeked.kind).toBe(decoded.kind);
        }
      }),
      { numRuns },
    );
  });
});
