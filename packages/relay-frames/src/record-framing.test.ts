import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { expectCodedError } from './__tests__/coded-error.js';
import { MessageFramingError, type MessageFramingErrorCode } from './errors.js';
import { MAX_MESSAGE_BYTES, MAX_RECORD_PLAINTEXT_BYTES } from './limits.js';
import { frameMessage, frameMessageParts, MessageReassembler } from './record-framing.js';

const expectFramingError = (fn: () => unknown, code: MessageFramingErrorCode): void =>
  expectCodedError(fn, MessageFramingError, code);

/** A message of `size` bytes whose content depends on `seed`, so swapped or shifted bytes are noticed. */
function message(size: number, seed: number): Uint8Array {
  const bytes = new Uint8Array(size);
  let x = (seed * 2_654_435_761 + 1) >>> 0;
  for (let i = 0; i < size; i += 1) {
    x = (Math.imul(x, 1_103_515_245) + 12_345) >>> 0;
    bytes[i] = x >>> 24;
  }
  return bytes;
}

function concat(parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.byteLength;
  }
  return out;
}

/** A length prefix alone, for declared-length tests. */
const prefix = (length: number): Uint8Array => {
  const bytes = new Uint8Array(4);
  new DataView(bytes.buffer).setUint32(0, length, false);
  return bytes;
};

/** Cuts `stream` at the given fractions of its length, then splits any piece longer than one record. */
function recut(stream: Uint8Array, fractions: readonly number[]): Uint8Array[] {
  const points = [...new Set([0, ...fractions.map((f) => Math.floor(f * stream.byteLength)), stream.byteLength])];
  points.sort((a, b) => a - b);
  const pieces: Uint8Array[] = [];
  for (let i = 0; i + 1 < points.length; i += 1) {
    for (let at = points[i]!; at < points[i + 1]!; at += MAX_RECORD_PLAINTEXT_BYTES) {
      pieces.push(stream.subarray(at, Math.min(at + MAX_RECORD_PLAINTEXT_BYTES, points[i + 1]!)));
    }
  }
  return pieces;
}

describe('frameMessage', () => {
  it('prefixes the big-endian length and keeps a small message in one record', () => {
    const records = frameMessage(new TextEncoder().encode('{"id":1}'));
    expect(records).toHaveLength(1);
    expect(Buffer.from(records[0]!).toString('hex')).toBe(`00000008${Buffer.from('{"id":1}').toString('hex')}`);
  });

  it.each([
    [61_436, [61_440]],
    [61_437, [61_440, 1]],
    [61_440, [61_440, 4]],
    [61_441, [61_440, 5]],
    [128 * 1024, [61_440, 61_440, 8196]],
  ])('cuts a %i-byte message into records of %j bytes', (size, sizes) => {
    const records = frameMessage(message(size, 1));
    expect(records.map((r) => r.byteLength)).toEqual(sizes);
    expect(Buffer.compare(concat(records).subarray(4), message(size, 1))).toBe(0);
  });

  it('frameMessageParts gives the same records as parts, with views into the message instead of a copy', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.integer({ min: 1, max: 300 }), fc.integer({ min: 61_430, max: 61_450 }), fc.nat(140_000)),
        (size) => {
          const json = message(Math.max(size, 1), size);
          const parts = frameMessageParts(json);
          const records = frameMessage(json);
          expect(parts).toHaveLength(records.length);
          for (const [i, record] of parts.entries()) expect(Buffer.compare(concat(record), records[i]!)).toBe(0);
          for (const part of parts.flat().slice(1)) expect(part.buffer).toBe(json.buffer);
        },
      ),
      { numRuns: 60 },
    );
    expectFramingError(() => frameMessageParts(new Uint8Array()), 'empty_message');
    expectFramingError(() => frameMessageParts(new Uint8Array(MAX_MESSAGE_BYTES + 1)), 'message_too_large');
  });

  it('rejects an empty or over-64-MiB message', () => {
    expectFramingError(() => frameMessage(new Uint8Array()), 'empty_message');
    expectFramingError(() => frameMessage(new Uint8Array(MAX_MESSAGE_BYTES + 1)), 'message_too_large');
  });

  it('accepts a message of exactly 64 MiB', () => {
    const records = frameMessage(new Uint8Array(MAX_MESSAGE_BYTES));
    expect(records).toHaveLength(Math.ceil((MAX_MESSAGE_BYTES + 4) / MAX_RECORD_PLAINTEXT_BYTES));
    const reassembler = new MessageReassembler();
    const out = records.flatMap((r) => reassembler.push(r));
    expect(out).toHaveLength(1);
    expect(out[0]!.byteLength).toBe(MAX_MESSAGE_BYTES);
  });
});

describe('MessageReassembler', () => {
  it('reassembles a 128 KiB message split into 60 KiB records (codex message_framing_tests)', () => {
    const original = message(128 * 1024, 7);
    const reassembler = new MessageReassembler();
    const records = frameMessage(original);
    expect(reassembler.push(records[0]!)).toEqual([]);
    expect(reassembler.push(records[1]!)).toEqual([]);
    expect(reassembler.bufferedBytes).toBe(2 * MAX_RECORD_PLAINTEXT_BYTES);
    expect(reassembler.idle).toBe(false);
    expect(reassembler.push(records[2]!)).toEqual([original]);
    expect(reassembler.idle).toBe(true);
  });

  it('lets one record finish a message, carry a whole one and start a third', () => {
    const a = message(10, 1);
    const b = message(3, 2);
    const c = message(20, 3);
    const stream = concat([...frameMessage(a), ...frameMessage(b), ...frameMessage(c)]);
    const reassembler = new MessageReassembler();
    expect(reassembler.push(stream.subarray(0, 6))).toEqual([]);
    expect(reassembler.push(stream.subarray(6, 30))).toEqual([a, b]);
    expect(reassembler.push(stream.subarray(30))).toEqual([c]);
  });

  it('accepts empty records and a length prefix split across records', () => {
    const a = message(5, 9);
    const stream = concat(frameMessage(a));
    const reassembler = new MessageReassembler();
    expect(reassembler.push(new Uint8Array())).toEqual([]);
    for (let i = 0; i < stream.byteLength - 1; i += 1) expect(reassembler.push(stream.subarray(i, i + 1))).toEqual([]);
    expect(reassembler.push(stream.subarray(stream.byteLength - 1))).toEqual([a]);
  });

  it('copies record bytes, so the caller may reuse its buffer', () => {
    const a = message(8, 4);
    const record = concat(frameMessage(a));
    const reassembler = new MessageReassembler();
    const first = record.slice(0, 6);
    expect(reassembler.push(first)).toEqual([]);
    first.fill(0);
    expect(reassembler.push(record.subarray(6))).toEqual([a]);
  });

  it('rejects a declared length of 0 or 64 MiB + 1 immediately, without its payload', () => {
    expectFramingError(() => new MessageReassembler().push(prefix(0)), 'empty_message');
    const reassembler = new MessageReassembler();
    expectFramingError(() => reassembler.push(prefix(MAX_MESSAGE_BYTES + 1)), 'message_too_large');
    expect(new MessageReassembler().push(prefix(MAX_MESSAGE_BYTES))).toEqual([]);
  });

  it('rejects a plaintext record over 61 440 bytes and accepts one of exactly 61 440', () => {
    expectFramingError(() => new MessageReassembler().push(new Uint8Array(61_441)), 'record_too_large');
    const full = concat([prefix(61_436), message(61_436, 5)]);
    expect(new MessageReassembler().push(full)).toEqual([message(61_436, 5)]);
  });

  it('stays failed after an error', () => {
    const reassembler = new MessageReassembler();
    expectFramingError(() => reassembler.push(prefix(0)), 'empty_message');
    expectFramingError(() => reassembler.push(concat(frameMessage(message(3, 1)))), 'failed');
  });

  it('round-trips messages of arbitrary sizes however the records are re-cut', () => {
    const size = fc.oneof(
      { weight: 1, arbitrary: fc.constantFrom(1, 61_435, 61_436, 61_437, 61_439, 61_440, 61_441, 122_876) },
      { weight: 3, arbitrary: fc.integer({ min: 1, max: 300 }) },
      { weight: 1, arbitrary: fc.integer({ min: 1, max: 3 * 1024 * 1024 }) },
    );
    fc.assert(
      fc.property(
        fc.array(size, { minLength: 1, maxLength: 4 }),
        fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 12 }),
        fc.boolean(),
        (sizes, cutFractions, keepSenderRecords) => {
          const messages = sizes.map((n, i) => message(n, i));
          const records = messages.flatMap((m) => frameMessage(m));
          expect(records.every((r) => r.byteLength > 0 && r.byteLength <= MAX_RECORD_PLAINTEXT_BYTES)).toBe(true);
          // Either the sender's records, or the concatenated stream re-cut at random points (each piece at
          // most one record long), so records mix the end of one message and the start of the next.
          const pieces = keepSenderRecords ? records : recut(concat(records), cutFractions);
          const reassembler = new MessageReassembler();
          const out = pieces.flatMap((p) => reassembler.push(p));
          expect(out).toHaveLength(messages.length);
          for (const [i, m] of out.entries()) expect(Buffer.compare(m, messages[i]!)).toBe(0);
          expect(reassembler.idle).toBe(true);
        },
      ),
      { numRuns: 60 },
    );
  });

  it('fuzz: random records throw only MessageFramingError and the buffer stays bounded', () => {
    const record = fc.oneof(
      fc.uint8Array({ maxLength: 64 }),
      // Small declared lengths, so messages actually complete between garbage.
      fc
        .tuple(fc.integer({ min: 0, max: 40 }), fc.uint8Array({ maxLength: 60 }))
        .map(([n, rest]) => concat([prefix(n), rest])),
      fc.integer({ min: 0, max: MAX_RECORD_PLAINTEXT_BYTES + 2 }).map((n) => new Uint8Array(n).fill(0x01)),
    );
    fc.assert(
      fc.property(fc.array(record, { maxLength: 20 }), (records) => {
        const reassembler = new MessageReassembler();
        for (const r of records) {
          try {
            for (const m of reassembler.push(r)) expect(m.byteLength).toBeGreaterThan(0);
          } catch (error) {
            expect(error).toBeInstanceOf(MessageFramingError);
            return;
          }
          expect(reassembler.bufferedBytes).toBeLessThanOrEqual(4 + MAX_MESSAGE_BYTES);
        }
      }),
      { numRuns: 2_000 },
    );
  });

  it('assembles every message in memory from `allocate`, once per message', () => {
    const sizes: number[] = [];
    const reassembler = new MessageReassembler({
      allocate: (size) => {
        sizes.push(size);
        return new Uint8Array(size).fill(0xee); // stale bytes: every one must be overwritten
      },
    });
    const json = new Uint8Array(150_000).map((_, i) => i & 0xff);
    const records = frameMessage(json);
    expect(records.length).toBeGreaterThan(2);
    const out = records.flatMap((record) => reassembler.push(record));
    expect(out).toHaveLength(1);
    expect(Buffer.from(out[0] as Uint8Array).equals(Buffer.from(json))).toBe(true);
    expect(sizes).toEqual([150_000]);
    // A message within one record is copied out of it into memory from `allocate` too (a pool's, in a
    // secure stream): the record's buffer is the caller's again once push() returns.
    const record = frameMessage(new Uint8Array([1, 2, 3]))[0] as Uint8Array;
    const [small] = reassembler.push(record);
    expect(sizes).toEqual([150_000, 3]);
    record.fill(0);
    expect([...(small as Uint8Array)]).toEqual([1, 2, 3]);
  });

  it('wholeMessage: a record that is exactly one message gives a view of it, anything else null and no change', () => {
    const reassembler = new MessageReassembler();
    const [record] = frameMessage(new Uint8Array(40_000).fill(7)) as [Uint8Array];
    expect(reassembler.atMessageStart).toBe(true);
    const whole = reassembler.wholeMessage(record);
    expect(whole?.byteLength).toBe(40_000);
    expect(whole?.buffer).toBe(record.buffer); // a view: no copy
    // A record with two messages, or the start of a longer one: null, and push() still reads it all.
    const two = Buffer.concat([frameMessage(new Uint8Array([1]))[0]!, frameMessage(new Uint8Array([2, 3]))[0]!]);
    expect(reassembler.wholeMessage(two)).toBeNull();
    const long = frameMessage(new Uint8Array(150_000).fill(9));
    expect(reassembler.wholeMessage(long[0]!)).toBeNull();
    expect(reassembler.push(two).map((m) => [...m])).toEqual([[1], [2, 3]]);
    // In the middle of a message it is never at a start, whatever the record says.
    expect(reassembler.push(long[0]!)).toEqual([]);
    expect(reassembler.atMessageStart).toBe(false);
    expect(reassembler.wholeMessage(record)).toBeNull();
    const rest = long.slice(1).flatMap((r) => reassembler.push(r));
    expect(rest).toHaveLength(1);
    expect(reassembler.atMessageStart).toBe(true);
  });

  it('opens records straight into the message they continue (bodyRoom/commitRoom), with the same messages', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 1, max: 400_000 }), { minLength: 1, maxLength: 4 }),
        fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 12 }),
        (sizes, cutFractions) => {
          const messages = sizes.map((n, i) => message(n, i));
          const pieces = recut(concat(messages.flatMap((m) => frameMessage(m))), cutFractions);
          const reassembler = new MessageReassembler();
          const out: Uint8Array[] = [];
          let straight = 0;
          for (const piece of pieces) {
            const room = reassembler.bodyRoom(piece.byteLength);
            if (room) {
              room.set(piece); // what opening the record into the room does
              straight++;
              out.push(...reassembler.commitRoom(piece.byteLength));
            } else out.push(...reassembler.push(piece));
          }
          expect(out).toHaveLength(messages.length);
          for (const [i, m] of out.entries()) expect(Buffer.compare(m, messages[i]!)).toBe(0);
          // A body longer than two records holds at least one record whole: it lands in place.
          if (sizes.some((n) => n > 2 * MAX_RECORD_PLAINTEXT_BYTES)) expect(straight).toBeGreaterThan(0);
          expect(reassembler.idle).toBe(true);
        },
      ),
      { numRuns: 60 },
    );
  });

  it('has no room for a record that starts a message, crosses into the next, or follows a failure', () => {
    const reassembler = new MessageReassembler();
    expect(reassembler.bodyRoom(10)).toBeNull(); // no message started: the prefix comes first
    expect(reassembler.push(prefix(100))).toEqual([]);
    expect(reassembler.bodyRoom(101)).toBeNull(); // longer than what is left of the body
    expect(reassembler.bodyRoom(0)).toBeNull();
    const room = reassembler.bodyRoom(100)!;
    expect(room.byteLength).toBe(100);
    expect(() => reassembler.commitRoom(99)).toThrow(/matching bodyRoom/);
    room.fill(7);
    expect(reassembler.commitRoom(100)).toEqual([new Uint8Array(100).fill(7)]);
    expect(() => reassembler.commitRoom(100)).toThrow(/matching bodyRoom/);
    expectFramingError(() => reassembler.push(prefix(0)), 'empty_message');
    expect(reassembler.bodyRoom(10)).toBeNull();
  });

  it('allocates a message of up to 4 MiB at its first body bytes, and keeps a larger one as it arrives', () => {
    const sizes: number[] = [];
    const reassembler = new MessageReassembler({
      allocate: (size) => {
        sizes.push(size);
        return new Uint8Array(size);
      },
    });
    const whole = 4 * 1024 * 1024;
    const small = frameMessage(message(whole, 1));
    reassembler.push(small[0]!);
    expect(sizes).toEqual([whole]);
    const rest = small.slice(1).flatMap((r) => reassembler.push(r));
    expect(Buffer.compare(rest[0]!, message(whole, 1))).toBe(0);
    sizes.length = 0;
    const large = frameMessage(message(whole + 1, 2));
    reassembler.push(large[0]!);
    expect(reassembler.bodyRoom(100)).toBeNull();
    expect(sizes).toEqual([]); // nothing reserved for what has not arrived
    const out = large.slice(1).flatMap((r) => reassembler.push(r));
    expect(sizes).toEqual([whole + 1]);
    expect(Buffer.compare(out[0]!, message(whole + 1, 2))).toBe(0);
  });
});
