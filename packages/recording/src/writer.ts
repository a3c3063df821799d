/**
 * Writes one process session as asciicast v2 (a JSON header line, then `[seconds, type, data]` lines): `o`
 * output, `i` input, `r` resize (`COLSxROWS`), and Tether's own types, which players skip: `tether.from` (who sent
 * the input that follows), `tether.exit`, `tether.gap` (bytes a recording had to drop) and `tether.seal`
 * (chain.ts). The writer only makes the lines (UTF-8 bytes, each ending in a newline); its owner writes them where
 * they go, in order. Bytes, not strings: each line is encoded once, and the chain hashes and the file gets those
 * same bytes (measured: encoding a 64 KiB line again cost as much as hashing it).
 *
 * Output is most of a recording's bytes, and its lines are made from the bytes themselves where they are valid
 * UTF-8 (nearly always): @tether/native-crypto's castLine escapes and hashes a chunk in one pass, about 1 ns per
 * byte against 2.8 for decoding, JSON.stringify, encoding and hashing it in JavaScript (bench/src/recording-line.ts).
 * The lines are the same bytes either way; without the addon, an ASCII chunk still skips the UTF-8 decode and
 * encode (latin1 is a copy for ASCII).
 */
import { isAscii, isUtf8 } from 'node:buffer';
import type { KeyObject } from 'node:crypto';
import { StringDecoder } from 'node:string_decoder';
import { loadNativeCrypto, type NativeCastLine } from '@tether/native-crypto';
import { firstLink, makeSeal, nextLink, SEAL_TYPE } from './chain.js';

export interface CastHeader {
  version: 2;
  width: number;
  height: number;
  /** Unix seconds of the start. */
  timestamp: number;
  command: string;
  title?: string;
  env?: Record<string, string>;
  /** Tether's own fields (asciicast players ignore the header fields they do not know). */
  tether: Record<string, unknown>;
}

export const FROM_TYPE = 'tether.from';
export const EXIT_TYPE = 'tether.exit';
export const GAP_TYPE = 'tether.gap';

const NOTHING = Buffer.alloc(0);
const LINE_TAIL = Buffer.from('"]');

/**
 * Where castLine writes output lines, one after another (a line is a slice of it, kept as long as the line is): a
 * buffer per line cost its allocation and a first pass counting the escapes, a quarter of the line's cost
 * (bench/src/recording-line.ts). A slab is left once it has no room for the longest line a chunk could make (6
 * bytes per byte), so at most that much of each slab goes unused. Its owner may give one to several writers of a
 * thread (the recording worker gives one to all its files); each writer has its own otherwise.
 */
export class LineSlab {
  static readonly BYTES = 4 * 1024 * 1024;
  #buffer = Buffer.alloc(0);
  #used = 0;

  /** The buffer that has room for a line of up to `bytes` bytes, and the line's offset in it. */
  room(bytes: number): { buffer: Buffer; at: number } {
    if (this.#buffer.length - this.#used < bytes) {
      this.#buffer = Buffer.allocUnsafeSlow(Math.max(LineSlab.BYTES, bytes));
      this.#used = 0;
    }
    return { buffer: this.#buffer, at: this.#used };
  }

  /** The line written at `at` is `length` bytes long: its slice (the next goes after it). */
  take(at: number, length: number): Buffer {
    this.#used = at + length;
    return this.#buffer.subarray(at, at + length);
  }
}

export interface CastWriterOptions {
  /** How output lines are made from bytes: the addon's (the default, when it loads), or null for JavaScript. */
  castLine?: NativeCastLine | null;
  /** Where the addon writes the lines (default: a slab of the writer's own). */
  slab?: LineSlab;
}

/**
 * One output stream's UTF-8 decoding. `need`: 0 when the decoder holds nothing, n > 0 when it holds the valid
 * start of a character that n more bytes complete, -1 when that is not known (it holds what it was given of
 * invalid bytes): then the decoder alone decodes until a chunk ends in ASCII.
 */
interface OutputStream {
  decoder: StringDecoder;
  need: number;
}

export class CastWriter {
  readonly #key: KeyObject;
  readonly #startMs: number;
  readonly #now: () => number;
  readonly #castLine: NativeCastLine | null;
  readonly #slab: LineSlab;
  readonly #streams = new Map<string, OutputStream>();
  #link: Buffer;
  #events = 0;
  #unsealed: Buffer[] = [];
  #lastFrom: string | null = null;

  /**
   * `now` is milliseconds (Date.now, or a test's clock); the header's own line is `headerLine`. Events may be
   * given the time they happened (`at`, ms of the same clock), when they are written later; `startMs` is the
   * session's start on that clock (default: now).
   */
  constructor(
    readonly header: CastHeader,
    key: KeyObject,
    now: () => number = Date.now,
    startMs: number = now(),
    options: CastWriterOptions = {},
  ) {
    this.#castLine = options.castLine === undefined ? (loadNativeCrypto()?.castLine ?? null) : options.castLine;
    this.#slab = options.slab ?? new LineSlab();
    this.#key = key;
    this.#now = now;
    this.#startMs = startMs;
    this.headerLine = JSON.stringify(header);
    this.#link = firstLink(this.headerLine);
  }

  readonly headerLine: string;

  /** Events written so far (seals not counted). */
  get events(): number {
    return this.#events;
  }

  /** Events since the last seal. */
  get unsealed(): number {
    return this.#unsealed.length;
  }

  /** The chain's head (link of the last event), as a later part's header names it. */
  get head(): string {
    return this.#link.toString('base64');
  }

  /**
   * Output of `stream` (a pty, stdout, stderr): decoded as UTF-8 across chunks (a character cut between two
   * reads is written whole with the second; invalid bytes become U+FFFD). '' when nothing is complete yet.
   * The bytes are the same as a StringDecoder's text in JSON; they are made from the chunk's bytes, and only
   * what is not valid UTF-8 (and a character cut between chunks) goes through the decoder.
   */
  output(stream: string, chunk: Buffer, at?: number): Buffer {
    if (chunk.length === 0) return NOTHING;
    let state = this.#streams.get(stream);
    if (state === undefined) {
      state = { decoder: new StringDecoder('utf8'), need: 0 };
      this.#streams.set(stream, state);
    }
    const { decoder } = state;
    // What the decoder gives (JSON-escaped in JavaScript), then `body`: valid UTF-8, escaped from its bytes.
    let text = '';
    let body = chunk;
    if (state.need !== 0) {
      if (state.need > 0 && continues(chunk, state.need)) {
        text = decoder.write(chunk.subarray(0, state.need));
        body = chunk.subarray(state.need);
        state.need = 0;
      } else {
        text = decoder.write(chunk);
        body = NOTHING;
        state.need = endsInAscii(chunk) ? 0 : -1;
      }
    }
    if (body.length > 0 && !isUtf8(body)) {
      const cut = cutCharacter(body);
      if (cut >= 0 && isUtf8(body.subarray(0, cut))) {
        // The decoder keeps the character's start (and returns '') until the next chunk completes it.
        decoder.write(body.subarray(cut));
        state.need = sequenceLength(body[cut]!) - (body.length - cut);
        body = body.subarray(0, cut);
      } else {
        text += decoder.write(body);
        state.need = endsInAscii(body) ? 0 : -1;
        body = NOTHING;
      }
    }
    if (text === '' && body.length === 0) return NOTHING;
    const seconds = this.#seconds(at);
    if (this.#castLine !== null) {
      const head = Buffer.from(`[${seconds},"o",${JSON.stringify(text).slice(0, -1)}`);
      const link = Buffer.allocUnsafe(32);
      const { buffer, at } = this.#slab.room(head.length + 6 * body.length + LINE_TAIL.length + 1);
      const length = this.#castLine(this.#link, head, body, LINE_TAIL, link, buffer, at);
      this.#chained(link);
      return this.#slab.take(at, length);
    }
    const ascii = text === '' && isAscii(body);
    const data = ascii ? body.toString('latin1') : text + body.toString('utf8');
    // For ASCII, latin1 is a copy both ways, where UTF-8 would be decoded and encoded.
    const line = Buffer.from(`${JSON.stringify([seconds, 'o', data])}\n`, ascii ? 'latin1' : 'utf8');
    this.#chained(nextLink(this.#link, line.subarray(0, line.length - 1)));
    return line;
  }

  /** Input that reached the process, and who sent it (a line of its own when the sender changes). */
  input(chunk: Buffer, from: string, at?: number): Buffer {
    const lines: Buffer[] = [];
    if (from !== this.#lastFrom) {
      this.#lastFrom = from;
      lines.push(this.#line(FROM_TYPE, from, at));
    }
    lines.push(this.#line('i', chunk.toString('utf8'), at));
    return lines.length === 1 ? lines[0]! : Buffer.concat(lines);
  }

  resize(cols: number, rows: number, at?: number): Buffer {
    return this.#line('r', `${cols}x${rows}`, at);
  }

  /** What a bounded queue could not keep: `bytes` of events dropped here. */
  gap(bytes: number, at?: number): Buffer {
    return this.#line(GAP_TYPE, String(bytes), at);
  }

  /** The exit, after whatever output the decoders still held. */
  exit(code: number, at?: number): Buffer {
    const lines: Buffer[] = [];
    for (const { decoder } of this.#streams.values()) {
      const rest = decoder.end();
      if (rest !== '') lines.push(this.#line('o', rest, at));
    }
    this.#streams.clear();
    lines.push(this.#line(EXIT_TYPE, String(code), at));
    return Buffer.concat(lines);
  }

  /** A seal of everything so far; empty when nothing is unsealed. */
  seal(): Buffer {
    if (this.#unsealed.length === 0) return NOTHING;
    const seal = makeSeal(this.#events, this.#link, this.#unsealed, this.#key);
    this.#unsealed = [];
    return Buffer.from(`${JSON.stringify([this.#seconds(), SEAL_TYPE, JSON.stringify(seal)])}\n`);
  }

  /** Seconds since the start, in ms steps, never going back (an event made at `at`, ms of the same clock). */
  #seconds(at = this.#now()): number {
    this.#lastMs = Math.max(this.#lastMs, Math.round(at - this.#startMs));
    return this.#lastMs / 1000;
  }

  #lastMs = 0;

  #line(type: string, data: string, at?: number): Buffer {
    const line = Buffer.from(`${JSON.stringify([this.#seconds(at), type, data])}\n`);
    // The link covers the line without its newline (as a verifier reads the file line by line).
    this.#chained(nextLink(this.#link, line.subarray(0, line.length - 1)));
    return line;
  }

  /** An event's line was made: `link` is its link. */
  #chained(link: Buffer): void {
    this.#link = link;
    this.#events++;
    this.#unsealed.push(link);
  }
}

/** Whether `bytes` starts with `count` UTF-8 continuation bytes. */
function continues(bytes: Buffer, count: number): boolean {
  if (bytes.length < count) return false;
  for (let i = 0; i < count; i++) if ((bytes[i]! & 0xc0) !== 0x80) return false;
  return true;
}

function endsInAscii(bytes: Buffer): boolean {
  return bytes.length > 0 && bytes[bytes.length - 1]! < 0x80;
}

/** The bytes of the UTF-8 sequence `lead` starts. */
function sequenceLength(lead: number): number {
  return lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
}

/**
 * Where the valid start of a character cut short by the end of `bytes` begins (its last 1 to 3 bytes), or -1:
 * the lead byte and what follows it as UTF-8 allows (no overlong form, surrogate, or code point past U+10FFFF).
 */
function cutCharacter(bytes: Buffer): number {
  const end = bytes.length;
  for (let at = end - 1; at >= 0 && at >= end - 3; at--) {
    const byte = bytes[at]!;
    if (byte < 0x80) return -1;
    if (byte < 0xc0) continue;
    if (byte < 0xc2 || byte > 0xf4 || end - at >= sequenceLength(byte)) return -1;
    if (end - at === 1) return at;
    const second = bytes[at + 1]!;
    const low = byte === 0xe0 ? 0xa0 : byte === 0xf0 ? 0x90 : 0x80;
    const high = byte === 0xed ? 0x9f : byte === 0xf4 ? 0x8f : 0xbf;
    if (second < low || second > high) return -1;
    return end - at === 2 || (bytes[at + 2]! & 0xc0) === 0x80 ? at : -1;
  }
  return -1;
}
