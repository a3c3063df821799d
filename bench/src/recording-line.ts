/**
 * What a recording's output line costs the recording worker, per byte of output, alone on one thread: 256 MiB of
 * text in 64 KiB chunks (as a pipe gives them) made into asciicast lines and chained, three ways side by side —
 * the first writer's (StringDecoder, JSON.stringify, UTF-8 encode, SHA-256), CastWriter in JavaScript (ASCII
 * chunks through latin1) and CastWriter with the addon's castLine (escape and hash in one pass) — and, as the
 * floor, SHA-256 of the same bytes alone. Medians of 7 rounds. `BENCH_RECORDING_LINE_TEXT` sets the text (the
 * default is bench:recording's line; try one with CJK or emoji).
 */
import { generateKeyPairSync } from 'node:crypto';
import { StringDecoder } from 'node:string_decoder';
import { loadNativeCrypto } from '@tether/native-crypto';
import { CastWriter, firstLink, nextLink } from '@tether/recording';

const TEXT =
  process.env.BENCH_RECORDING_LINE_TEXT ?? 'building target 42 of 97: src/module/file.ts -> dist/module/file.js (ok)\n';
const BYTES = Number(process.env.BENCH_RECORDING_LINE_BYTES ?? 256 * 1024 * 1024);
const CHUNK = 64 * 1024;
const ROUNDS = 7;

const whole = Buffer.from(TEXT.repeat(Math.ceil(BYTES / Buffer.byteLength(TEXT)))).subarray(0, BYTES);
const chunks: Buffer[] = [];
for (let at = 0; at < whole.length; at += CHUNK) chunks.push(whole.subarray(at, at + CHUNK));
const { privateKey } = generateKeyPairSync('ed25519');
const header = { version: 2 as const, width: 80, height: 24, timestamp: 0, command: 'bench', tether: {} };
const castLine = loadNativeCrypto()?.castLine;
if (castLine === undefined) throw new Error('the native-crypto addon is not built');

type Way = () => number;
const ways: Record<string, Way> = {
  'first writer (decode, stringify, encode, hash)': () => {
    const decoder = new StringDecoder('utf8');
    let link = firstLink(JSON.stringify(header));
    let bytes = 0;
    for (const [i, chunk] of chunks.entries()) {
      const line = Buffer.from(`${JSON.stringify([i / 1000, 'o', decoder.write(chunk)])}\n`);
      link = nextLink(link, line.subarray(0, line.length - 1));
      bytes += line.length;
    }
    return bytes;
  },
  'CastWriter, JavaScript': () => run(null),
  'CastWriter, castLine': () => run(castLine),
  'SHA-256 alone': () => {
    let link = firstLink('');
    for (const chunk of chunks) link = nextLink(link, chunk);
    return link.length;
  },
};

function run(lines: typeof castLine | null): number {
  let ms = 0;
  const writer = new CastWriter(header, privateKey, () => ms, 0, { castLine: lines });
  let bytes = 0;
  for (const chunk of chunks) {
    ms++;
    bytes += writer.output('stdout', chunk).length;
  }
  return bytes;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[values.length >> 1]!;
const samples: Record<string, number[]> = Object.fromEntries(Object.keys(ways).map((name) => [name, []]));
for (let round = 0; round < ROUNDS; round++) {
  for (const [name, way] of Object.entries(ways)) {
    const t0 = process.hrtime.bigint();
    way();
    samples[name]!.push(Number(process.hrtime.bigint() - t0) / BYTES);
  }
}
console.log(`| ${BYTES >> 20} MiB in 64 KiB chunks | ns per byte (median of ${ROUNDS}) |`);
console.log('|---|---:|');
for (const [name, values] of Object.entries(samples)) console.log(`| ${name} | ${median(values).toFixed(2)} |`);
