import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { expectCodedError } from './__tests__/coded-error.js';
import { SequenceError, type SequenceErrorCode } from './errors.js';
import { MAX_REORDER_BYTES, MAX_REORDER_DISTANCE, MAX_SEQ } from './limits.js';
import { OrderedReceiveWindow, SendSequence } from './ordered-window.js';

const expectSequenceError = (fn: () => unknown, code: SequenceErrorCode): void =>
  expectCodedError(fn, SequenceError, code);

/** A one-byte record tagged with its seq (and a copy number, to tell duplicates apart). */
const rec = (seq: number, copy = 0): Uint8Array => new Uint8Array([seq & 0xff, (seq >>> 8) & 0xff, copy]);
const seqOf = (record: Uint8Array): number => record[0]! | (record[1]! << 8);

describe('OrderedReceiveWindow', () => {
  it('starts at 0 and releases in-order records at once', () => {
    const window = new OrderedReceiveWindow();
    expect(window.nextSeq).toBe(0);
    expect(window.push(0, rec(0))).toEqual([rec(0)]);
    expect(window.push(1, rec(1))).toEqual([rec(1)]);
    expect(window.nextSeq).toBe(2);
  });

  it('releases ciphertexts only in nonce order (codex ordered_ciphertext_tests)', () => {
    const window = new OrderedReceiveWindow();
    expect(window.push(2, rec(2))).toEqual([]);
    expect(window.push(1, rec(1))).toEqual([]);
    expect(window.bufferedRecords).toBe(2);
    expect(window.bufferedBytes).toBe(6);
    expect(window.push(0, rec(0))).toEqual([rec(0), rec(1), rec(2)]);
    expect(window.bufferedRecords).toBe(0);
    expect(window.bufferedBytes).toBe(0);
    expect(window.nextSeq).toBe(3);
  });

  it('drops duplicates silently: the first buffered copy wins, old seqs are ignored', () => {
    const window = new OrderedReceiveWindow();
    expect(window.push(1, rec(1, 1))).toEqual([]);
    expect(window.push(1, rec(1, 2))).toEqual([]);
    expect(window.push(0, rec(0))).toEqual([rec(0), rec(1, 1)]);
    expect(window.push(0, rec(0, 9))).toEqual([]);
    expect(window.push(1, rec(1, 9))).toEqual([]);
    expect(window.droppedDuplicates).toBe(3);
    expect(window.nextSeq).toBe(2);
  });

  it('buffers a record exactly 64 ahead and fails one 65 ahead', () => {
    const window = new OrderedReceiveWindow();
    expect(window.push(MAX_REORDER_DISTANCE, rec(64))).toEqual([]);
    expectSequenceError(() => window.push(MAX_REORDER_DISTANCE + 1, rec(65)), 'window_distance');
  });

  it('measures the distance from the current next seq', () => {
    const window = new OrderedReceiveWindow();
    for (let seq = 0; seq < 10; seq += 1) window.push(seq, rec(seq));
    expect(window.push(10 + MAX_REORDER_DISTANCE, rec(74))).toEqual([]);
    expectSequenceError(() => window.push(11 + MAX_REORDER_DISTANCE, rec(75)), 'window_distance');
  });

  it('fills the whole window behind one gap and releases all 65 records in order', () => {
    const window = new OrderedReceiveWindow();
    for (let seq = MAX_REORDER_DISTANCE; seq >= 1; seq -= 1) expect(window.push(seq, rec(seq))).toEqual([]);
    expect(window.bufferedRecords).toBe(64);
    const released = window.push(0, rec(0));
    expect(released.map(seqOf)).toEqual(Array.from({ length: 65 }, (_, i) => i));
  });

  it('fails when more than 1 MiB is buffered out of order', () => {
    const window = new OrderedReceiveWindow();
    const quarter = MAX_REORDER_BYTES / 4;
    for (let seq = 1; seq <= 4; seq += 1) window.push(seq, new Uint8Array(quarter));
    expect(window.bufferedBytes).toBe(MAX_REORDER_BYTES);
    expectSequenceError(() => window.push(5, new Uint8Array(1)), 'window_bytes');
  });

  it('fails when more records are buffered than maxRecords allows', () => {
    const window = new OrderedReceiveWindow({ maxRecords: 2 });
    window.push(1, rec(1));
    window.push(2, rec(2));
    expectSequenceError(() => window.push(3, rec(3)), 'window_records');
  });

  it('only takes limits tighter than the wire limits', () => {
    expect(() => new OrderedReceiveWindow({ maxDistance: 65 })).toThrow(RangeError);
    expect(() => new OrderedReceiveWindow({ maxBytes: MAX_REORDER_BYTES + 1 })).toThrow(RangeError);
    expect(() => new OrderedReceiveWindow({ maxRecords: 1.5 })).toThrow(RangeError);
    const tight = new OrderedReceiveWindow({ maxDistance: 2 });
    expect(tight.push(2, rec(2))).toEqual([]);
    expectSequenceError(() => tight.push(3, rec(3)), 'window_distance');
  });

  it('stays failed after an error, even for the record it was waiting for', () => {
    const window = new OrderedReceiveWindow();
    expectSequenceError(() => window.push(100, rec(100)), 'window_distance');
    expectSequenceError(() => window.push(0, rec(0)), 'failed');
  });

  it('rejects a seq that is not a u32', () => {
    expectSequenceError(() => new OrderedReceiveWindow().push(-1, rec(0)), 'invalid_seq');
    expectSequenceError(() => new OrderedReceiveWindow().push(2 ** 32, rec(0)), 'invalid_seq');
    expectSequenceError(() => new OrderedReceiveWindow().push(0.5, rec(0)), 'invalid_seq');
    expectSequenceError(() => new OrderedReceiveWindow({ firstSeq: 2 ** 32 }), 'invalid_seq');
  });

  it('never wraps: after seq 2^32 - 1 is released the stream is exhausted', () => {
    const window = new OrderedReceiveWindow({ firstSeq: MAX_SEQ - 1 });
    expect(window.push(MAX_SEQ, rec(1))).toEqual([]);
    expect(window.push(MAX_SEQ - 1, rec(0))).toEqual([rec(0), rec(1)]);
    expectSequenceError(() => window.push(0, rec(0)), 'seq_exhausted');
    expectSequenceError(() => window.push(MAX_SEQ, rec(1)), 'failed');
  });

  it('delivers every random reordering within the window exactly once, in order', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 300 }),
        fc.integer({ min: 1, max: MAX_REORDER_DISTANCE + 1 }),
        fc.infiniteStream(fc.nat()),
        fc.array(fc.nat(), { maxLength: 40 }),
        (count, block, randoms, duplicatePicks) => {
          // Shuffle within consecutive blocks of at most 65 seqs: no record is ever more than 64 ahead.
          const order: number[] = [];
          const it = randoms[Symbol.iterator]();
          for (let start = 0; start < count; start += block) {
            const chunk = Array.from({ length: Math.min(block, count - start) }, (_, i) => start + i);
            for (let i = chunk.length - 1; i > 0; i -= 1) {
              const j = it.next().value! % (i + 1);
              [chunk[i], chunk[j]] = [chunk[j]!, chunk[i]!];
            }
            order.push(...chunk);
          }
          // Replay some records later (copy 1): duplicates must be dropped, never delivered.
          const deliveries = order.map((seq) => ({ seq, copy: 0 }));
          for (const pick of duplicatePicks) {
            const at = pick % deliveries.length;
            const original = deliveries[at]!;
            deliveries.splice(at + 1 + (pick % 3), 0, { seq: original.seq, copy: 1 });
          }
          const window = new OrderedReceiveWindow();
          const released = deliveries.flatMap(({ seq, copy }) => window.push(seq, rec(seq, copy)));
          expect(released.map(seqOf)).toEqual(Array.from({ length: count }, (_, i) => i));
          expect(released.every((r) => r[2] === 0)).toBe(true);
          expect(window.bufferedRecords).toBe(0);
          expect(window.nextSeq).toBe(count);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('fails closed on any record beyond the window, whatever came before', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 200 }),
        fc.integer({ min: MAX_REORDER_DISTANCE + 1, max: 10_000 }),
        (delivered, ahead) => {
          const window = new OrderedReceiveWindow();
          for (let seq = 0; seq < delivered; seq += 1) window.push(seq, rec(seq));
          expectSequenceError(() => window.push(delivered + ahead, rec(0)), 'window_distance');
          expectSequenceError(() => window.push(delivered, rec(delivered)), 'failed');
        },
      ),
      { numRuns: 300 },
    );
  });

  it('fuzz: arbitrary pushes throw only SequenceError and never exceed the bounds', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.oneof(fc.integer({ min: 0, max: 100 }), fc.integer()), fc.nat({ max: 300_000 }))),
        (pushes) => {
          const window = new OrderedReceiveWindow();
          for (const [seq, size] of pushes) {
            try {
              window.push(seq, new Uint8Array(size));
            } catch (error) {
              expect(error).toBeInstanceOf(SequenceError);
            }
            expect(window.bufferedRecords).toBeLessThanOrEqual(64);
            expect(window.bufferedBytes).toBeLessThanOrEqual(MAX_REORDER_BYTES);
          }
        },
      ),
      { numRuns: 1_000 },
    );
  });
});

describe('SendSequence', () => {
  it('hands out 0, 1, 2, …', () => {
    const sequence = new SendSequence();
    expect(sequence.nextSeq).toBe(0);
    expect([sequence.take(), sequence.take(), sequence.take()]).toEqual([0, 1, 2]);
    expect(sequence.nextSeq).toBe(3);
  });

  it('never wraps: 2^32 - 1 is the last seq, then it is exhausted', () => {
    const sequence = new SendSequence({ firstSeq: MAX_SEQ - 1 });
    expect(sequence.take()).toBe(MAX_SEQ - 1);
    expect(sequence.take()).toBe(MAX_SEQ);
    expect(sequence.nextSeq).toBeNull();
    expectSequenceError(() => sequence.take(), 'seq_exhausted');
    expectSequenceError(() => sequence.take(), 'seq_exhausted');
  });

  it('rejects a first seq that is not a u32', () => {
    expectSequenceError(() => new SendSequence({ firstSeq: -1 }), 'invalid_seq');
    expectSequenceError(() => new SendSequence({ firstSeq: MAX_SEQ + 1 }), 'invalid_seq');
  });
});
