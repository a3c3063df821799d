/**
 * Writes one process session as asciicast v2 (a JSON header line, then `[seconds, type, data]` lines): `o`
 * output, `i` input, `r` resize (`COLSxROWS`), and Tether's own types, which players skip: `tether.from` (who sent
 * the input that follows), `tether.exit`, `tether.gap` (bytes a recording had to drop) and `tether.seal`
 * (chain.ts). The writer only makes the lines (UTF-8 bytes, each ending in a newline); its owner writes them where
 * they go, in order. Bytes, not strings: each line is encoded once, and the chain hashes and the file gets those
 * same bytes (measured: encoding a 64 KiB line again cost as much as hashing it).
 */
import type { KeyObject } from 'node:crypto';
import { StringDecoder } from 'node:string_decoder';
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

export class CastWriter {
  readonly #key: KeyObject;
  readonly #startMs: number;
  readonly #now: () => number;
  readonly #decoders = new Map<string, StringDecoder>();
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
  ) {
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
   */
  output(stream: string, chunk: Buffer, at?: number): Buffer {
    let decoder = this.#decoders.get(stream);
    if (decoder === undefined) {
      decoder = new StringDecoder('utf8');
      this.#decoders.set(stream, decoder);
    }
    const text = decoder.write(chunk);
    return text === '' ? NOTHING : this.#line('o', text, at);
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
    for (const decoder of this.#decoders.values()) {
      const rest = decoder.end();
      if (rest !== '') lines.push(this.#line('o', rest, at));
    }
    this.#decoders.clear();
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
    this.#link = nextLink(this.#link, line.subarray(0, line.length - 1));
    this.#events++;
    this.#unsealed.push(this.#link);
    return line;
  }
}
