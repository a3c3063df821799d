import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeFrame, encodeFrame } from './codec.js';
import { FrameError, MessageFramingError, SequenceError } from './errors.js';
import { dataFrame, handshakeFrame, resetFrame } from './frame.js';
import { MAX_MESSAGE_BYTES, MAX_RECORD_PLAINTEXT_BYTES } from './limits.js';
import { OrderedReceiveWindow } from './ordered-window.js';
import { frameMessage, MessageReassembler } from './record-framing.js';

// Hostile input inside and around the Noise channel (issue 16): the record reassembler, the receive window
// and the frame decoder against arbitrary records, sequence numbers and length fields. Runs per property:
// TETHER_FUZZ_RUNS (`pnpm fuzz` raises it); a failure prints the seed to replay it.
const numRuns = Number(process.env.TETHER_FUZZ_RUNS) || 300;
// TETHER_FUZZ_SEED replays a failure's printed seed.
if (process.env.TETHER_FUZZ_SEED) fc.configureGlobal({ seed: Number(process.env.TETHER_FUZZ_SEED) });

/** A reassembler whose allocations are recorded: what a declared length can make it reserve. */
function countingReassembler(): { reassembler: MessageReassembler; allocations: number[] } {
  const allocations: number[] = [];
  const reassembler = new MessageReassembler({
    allocate: (size) => {
      allocations.push(size);
      return new Uint8Array(size);
    },
  });
  return { reassembler, allocations };
}

/** Cuts `bytes` into records of at most the record size, at the given points (and wherever a record is full). */
function cutIntoRecords(bytes: Uint8Array, cuts: number[]): Uint8Array[] {
  const points = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
  const records: Uint8Array[] = [];
  let from = 0;
  for (const point of [...points, bytes.length]) {
    for (; point - from > MAX_RECORD_PLAINTEXT_BYTES; from += MAX_RECORD_PLAINTEXT_BYTES) {
      records.push(bytes.subarray(from, from + MAX_RECORD_PLAINTEXT_BYTES));
    }
    if (point > from) records.push(bytes.subarray(from, point));
    from = Math.max(from, point);
  }
  return records;
}

const messageBytes = fc.oneof(
  fc.uint8Array({ minLength: 1, maxLength: 300 }),
  fc.integer({ min: 61_000, max: 200_000 }).map((n) => new Uint8Array(n).fill(n & 0xff)),
);

describe('fuzz: message reassembly inside the Noise channel', () => {
  it('rebuilds any messages however the framed bytes are cut into records', () => {
    fc.assert(
      fc.property(
        fc.array(messageBytes, { minLength: 1, maxLength: 4 }),
        fc.array(fc.nat(), { maxLength: 10 }),
        (messages, cuts) => {
          const stream = Buffer.concat(messages.flatMap((message) => frameMessage(message)));
          const { reassembler } = countingReassembler();
          const out = cutIntoRecords(stream, cuts).flatMap((record) => reassembler.push(record));
          expect(out.map((m) => Buffer.from(m).toString('hex'))).toEqual(
            messages.map((m) => Buffer.from(m).toString('hex')),
          );
          expect(reassembler.idle).toBe(true);
        },
      ),
      { numRuns: Math.max(30, Math.ceil(numRuns / 5)) },
    );
  });

  it('arbitrary records yield messages or a final MessageFramingError, pinning no more than arrived', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.uint8Array({ maxLength: 64 }),
            // A plausible prefix (small length) then random body bytes.
            fc
              .tuple(fc.integer({ min: 0, max: 200 }), fc.uint8Array({ maxLength: 64 }))
              .map(([n, body]) => Buffer.concat([Buffer.of(0, 0, 0, n), body])),
          ),
          { maxLength: 12 },
        ),
        (records) => {
          const { reassembler, allocations } = countingReassembler();
          let received = 0;
          let failed = false;
          for (const record of records) {
            try {
              if (failed) {
                expect(() => reassembler.push(record)).toThrow(MessageFramingError);
                continue;
              }
              received += record.length;
              reassembler.push(record);
              expect(reassembler.bufferedBytes).toBeLessThanOrEqual(received);
            } catch (error) {
              expect(error).toBeInstanceOf(MessageFramingError);
              failed = true;
            }
          }
          // What a small message reserves is its declared length, and that was checked first.
          for (const size of allocations) expect(size).toBeLessThanOrEqual(4 * 1024 * 1024);
        },
      ),
      { numRuns },
    );
  });

  it('a declared length of 0 or above 64 MiB (up to 4 GiB) is refused as soon as the prefix is complete', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.constant(0), fc.integer({ min: MAX_MESSAGE_BYTES + 1, max: 0xffff_ffff })),
        fc.integer({ min: 1, max: 4 }),
        fc.uint8Array({ maxLength: 32 }),
        (declared, split, body) => {
          const prefix = Buffer.alloc(4);
          prefix.writeUInt32BE(declared);
          const { reassembler, allocations } = countingReassembler();
          // The prefix may itself arrive in two records.
          if (split < 4) expect(reassembler.push(prefix.subarray(0, split))).toEqual([]);
          const rest = Buffer.concat([prefix.subarray(split < 4 ? split : 0), body]);
          expect(() => reassembler.push(rest)).toThrow(
            expect.objectContaining({ code: declared === 0 ? 'empty_message' : 'message_too_large' }),
          );
          expect(allocations).toEqual([]);
          expect(reassembler.bodyRoom(1)).toBeNull();
        },
      ),
      { numRuns },
    );
  });
});

/** The receive window's contract, written plainly: the model the window must agree with. */
function modelWindow() {
  let next = 0;
  const buffered = new Map<number, number>();
  let bytes = 0;
  let failed: string | null = null;
  return {
    push(seq: number, size: number): number[] | string {
      if (failed) return 'failed';
      if (seq < next || buffered.has(seq)) return [];
      if (seq > next) {
        if (seq - next > 64) failed = 'window_distance';
        else if (buffered.size + 1 > 64) failed = 'window_records';
        else if (bytes + size > 1024 * 1024) failed = 'window_bytes';
        if (failed) return failed;
        buffered.set(seq, size);
        bytes += size;
        return [];
      }
      const released = [seq];
      for (next = seq + 1; buffered.has(next); next++) {
        bytes -= buffered.get(next)!;
        buffered.delete(next);
        released.push(next);
      }
      return released;
    },
  };
}

describe('fuzz: ordered receive window', () => {
  it('agrees with its model for any sequence of seqs: in-order release, first copy wins, typed final errors', () => {
    const seqs = fc.array(
      fc.tuple(
        fc.oneof(fc.integer({ min: 0, max: 80 }), fc.integer({ min: 0, max: 0xffff_ffff })),
        fc.oneof(fc.integer({ min: 4, max: 40 }), fc.constantFrom(300_000, 600_000)),
      ),
      { maxLength: 80 },
    );
    fc.assert(
      fc.property(seqs, (pushes) => {
        const window = new OrderedReceiveWindow();
        const model = modelWindow();
        for (const [seq, size] of pushes) {
          const expected = model.push(seq, size);
          const record = new Uint8Array(size);
          new DataView(record.buffer).setUint32(0, seq >>> 0);
          if (typeof expected === 'string') {
            expect(() => window.push(seq, record)).toThrow(SequenceError);
            continue;
          }
          expect(window.push(seq, record).map((r) => new DataView(r.buffer).getUint32(0))).toEqual(expected);
        }
      }),
      { numRuns },
    );
  });

  it('refuses seqs that are not u32 with SequenceError', () => {
    fc.assert(
      fc.property(fc.oneof(fc.double(), fc.integer({ min: -(2 ** 40), max: -1 }), fc.constant(2 ** 32)), (seq) => {
        fc.pre(!(Number.isInteger(seq) && seq >= 0 && seq <= 0xffff_ffff));
        expect(() => new OrderedReceiveWindow().push(seq, new Uint8Array(1))).toThrow(SequenceError);
      }),
      { numRuns },
    );
  });
});

/** Protobuf varint bytes of `value` (up to 2^53). */
function varint(value: number): number[] {
  const out: number[] = [];
  let v = value;
  while (v >= 0x80) {
    out.push((v % 0x80) | 0x80);
    v = Math.floor(v / 0x80);
  }
  out.push(v);
  return out;
}

describe('fuzz: relay frame length fields', () => {
  it('a length-delimited field claiming up to 2^40 bytes in a short frame is refused with FrameError', () => {
    const frames = [
      encodeFrame(dataFrame('s', 1, new Uint8Array(40))),
      encodeFrame(handshakeFrame('s', new Uint8Array(40))),
      encodeFrame(resetFrame('s', 'reason')),
    ];
    fc.assert(
      fc.property(
        fc.constantFrom(...frames),
        fc.nat(),
        fc.oneof(fc.integer({ min: 0, max: 300 }), fc.integer({ min: 2 ** 16, max: 2 ** 40 })),
        (frame, at, claimed) => {
          // Overwrite the byte at `at` and what follows with a varint: wherever it lands, a length or tag.
          const i = at % frame.length;
          const bytes = Uint8Array.from([...frame.subarray(0, i), ...varint(claimed), ...frame.subarray(i + 1)]);
          try {
            decodeFrame(bytes);
          } catch (error) {
            expect(error).toBeInstanceOf(FrameError);
          }
        },
      ),
      { numRuns },
    );
  });
});
