/**
 * Output lines are made from bytes (the addon's castLine, or JavaScript's ASCII path) and must be byte for byte
 * what decoding with a StringDecoder and JSON.stringify make: compared here with that reference, chunk by chunk
 * and link by link, on adversarial and random streams cut at random places.
 */
import { generateKeyPairSync } from 'node:crypto';
import { StringDecoder } from 'node:string_decoder';
import { loadNativeCrypto } from '@tether/native-crypto';
import { describe, expect, it } from 'vitest';
import { firstLink, nextLink } from './chain.js';
import { type CastHeader, CastWriter, EXIT_TYPE } from './writer.js';

const { privateKey } = generateKeyPairSync('ed25519');
const HEADER: CastHeader = { version: 2, width: 80, height: 24, timestamp: 1, command: 'sh', tether: {} };

/** The lines as the first writer made them: a StringDecoder per stream, JSON.stringify, UTF-8, SHA-256 chain. */
class ReferenceWriter {
  readonly #decoders = new Map<string, StringDecoder>();
  link = firstLink(JSON.stringify(HEADER));

  output(stream: string, chunk: Buffer, ms: number): Buffer {
    let decoder = this.#decoders.get(stream);
    if (decoder === undefined) {
      decoder = new StringDecoder('utf8');
      this.#decoders.set(stream, decoder);
    }
    const text = decoder.write(chunk);
    return text === '' ? Buffer.alloc(0) : this.#line('o', text, ms);
  }

  exit(code: number, ms: number): Buffer {
    const lines: Buffer[] = [];
    for (const decoder of this.#decoders.values()) {
      const rest = decoder.end();
      if (rest !== '') lines.push(this.#line('o', rest, ms));
    }
    lines.push(this.#line(EXIT_TYPE, String(code), ms));
    return Buffer.concat(lines);
  }

  #line(type: string, data: string, ms: number): Buffer {
    const line = Buffer.from(`${JSON.stringify([ms / 1000, type, data])}\n`);
    this.link = nextLink(this.link, line.subarray(0, line.length - 1));
    return line;
  }
}

const native = loadNativeCrypto();
const WAYS = [
  ['the addon', native?.castLine ?? undefined],
  ['JavaScript', null],
] as const;

/** A small deterministic generator (xorshift32), so that a failure names a seed that repeats it. */
function random(seed: number): (below: number) => number {
  let state = seed | 1;
  return (below) => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) % below;
  };
}

/** Pieces a stream is made of: text a terminal prints, what JSON escapes, and what UTF-8 does not allow. */
const PIECES: Buffer[] = [
  'plain text ',
  'building target 42 of 97: src/module/file.ts -> dist/module/file.js (ok)\n',
  '"quoted" \\back\\slash ',
  '\r\n\t\b\f\v\x00\x01\x1b[31mred\x1b[0m\x7f',
  'é ü ß ', // 2 bytes
  'ソースを確認しました ', // 3 bytes
  '\u2028\u2029 ', // line separators: JSON.stringify leaves them
  '\ufffd ', // the replacement character itself
  '🙂🚀 ', // 4 bytes
].map((text) => Buffer.from(text));
const INVALID: Buffer[] = [
  [0x80],
  [0xbf, 0x80],
  [0xc0, 0x80], // overlong
  [0xc1, 0xbf],
  [0xe0, 0x80, 0x80], // overlong
  [0xed, 0xa0, 0x80], // a surrogate
  [0xf0, 0x80, 0x80, 0x80],
  [0xf4, 0x90, 0x80, 0x80], // past U+10FFFF
  [0xf5, 0x80],
  [0xff],
  [0xe3, 0x81], // a character cut short, then something else
  [0xf0, 0x9f, 0x99],
  [0xc3],
].map((bytes) => Buffer.from(bytes));

function stream(next: (below: number) => number, pieces: number, invalidOneIn: number): Buffer {
  const parts: Buffer[] = [];
  for (let i = 0; i < pieces; i++) {
    const pool = invalidOneIn > 0 && next(invalidOneIn) === 0 ? INVALID : PIECES;
    parts.push(pool[next(pool.length)]!);
  }
  return Buffer.concat(parts);
}

/** `bytes` cut at random places (empty and one-byte chunks included), and the same cuts every time for a seed. */
function chunks(next: (below: number) => number, bytes: Buffer): Buffer[] {
  const out: Buffer[] = [];
  let at = 0;
  while (at < bytes.length) {
    const kind = next(8);
    const length = kind === 0 ? 0 : kind === 1 ? 1 : kind === 2 ? 1 + next(4) : 1 + next(kind === 7 ? 20_000 : 300);
    out.push(bytes.subarray(at, at + length));
    at += length;
  }
  return out;
}

/** Writes `streams` interleaved through both writers and expects the same bytes and links at every step. */
function expectSame(castLine: (typeof WAYS)[number][1], seed: number, streams: Buffer[][]): void {
  let ms = 0;
  const writer = new CastWriter(HEADER, privateKey, () => ms, 0, { castLine });
  const reference = new ReferenceWriter();
  const next = random(seed);
  const at = streams.map(() => 0);
  const allMade: Buffer[] = [];
  const allExpected: Buffer[] = [];
  for (;;) {
    const open = streams.map((_, i) => i).filter((i) => at[i]! < streams[i]!.length);
    if (open.length === 0) break;
    const i = open[next(open.length)]!;
    const chunk = streams[i]![at[i]!++]!;
    ms += next(3);
    const made = writer.output(`s${i}`, chunk, ms);
    const expected = reference.output(`s${i}`, chunk, ms);
    allMade.push(made);
    allExpected.push(expected);
    if (!made.equals(expected)) {
      expect({ seed, chunk: chunk.toString('hex'), made: made.toString() }).toEqual({
        seed,
        chunk: chunk.toString('hex'),
        made: expected.toString(),
      });
    }
    expect(writer.head).toBe(reference.link.toString('base64'));
  }
  expect(writer.exit(0, ms).equals(reference.exit(0, ms))).toBe(true);
  expect(writer.head).toBe(reference.link.toString('base64'));
  // Lines made earlier are still theirs (the addon's lines share buffers with later ones).
  expect(Buffer.concat(allMade).equals(Buffer.concat(allExpected))).toBe(true);
}

describe('output lines made from bytes', () => {
  it('the addon is built and makes them', () => {
    expect(native?.castLine).toBeTypeOf('function');
  });

  for (const [way, castLine] of WAYS) {
    describe(`by ${way}`, () => {
      it('are the reference’s bytes for every byte value and every piece, whole and cut before each byte', () => {
        const everyByte = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
        for (const bytes of [everyByte, ...PIECES, ...INVALID, Buffer.concat(PIECES)]) {
          expectSame(castLine, 1, [[bytes]]);
          for (let cut = 1; cut < bytes.length; cut++) {
            expectSame(castLine, cut, [[bytes.subarray(0, cut), bytes.subarray(cut)]]);
          }
          // A byte at a time: every character is cut.
          expectSame(
            castLine,
            2,
            [...bytes].map((byte) => [Buffer.from([byte])]),
          );
          expectSame(castLine, 3, [[...bytes].map((byte) => Buffer.from([byte]))]);
        }
      });

      it('are the reference’s bytes for random valid text cut anywhere, several streams interleaved', () => {
        for (let seed = 1; seed <= 40; seed++) {
          const next = random(seed);
          const streams = [0, 1, 2].map(() => chunks(next, stream(next, 200 + next(2_000), 0)));
          expectSame(castLine, seed, streams);
        }
      });

      it('are the reference’s bytes when invalid bytes come in anywhere', () => {
        for (let seed = 1; seed <= 60; seed++) {
          const next = random(seed * 7919);
          const streams = [0, 1].map(() => chunks(next, stream(next, 100 + next(1_500), 1 + next(20))));
          expectSame(castLine, seed, streams);
        }
      });

      it('are the reference’s bytes for random bytes, and for long lines past the addon’s block', () => {
        for (let seed = 1; seed <= 20; seed++) {
          const next = random(seed * 104_729);
          const bytes = Buffer.from(Array.from({ length: 5_000 + next(50_000) }, () => next(256)));
          expectSame(castLine, seed, [chunks(next, bytes)]);
        }
        const long = stream(random(5), 4_000, 0);
        expectSame(castLine, 4, [[long, long.subarray(1), long.subarray(0, long.length - 1)]]);
      });

      it('are the reference’s bytes over many megabytes in 64 KiB chunks, three streams interleaved', () => {
        const text = stream(random(11), 600_000, 0);
        const cut = (from: number) => {
          const parts: Buffer[] = [];
          for (let at = from; at < text.length; at += 65_536) parts.push(text.subarray(at, at + 65_536));
          return parts;
        };
        expectSame(castLine, 6, [cut(0), cut(1), cut(2)]);
      });
    });
  }
});
