import { createHash } from 'node:crypto';

/**
 * A position-coded byte pattern for end-to-end integrity checks: 16-byte records `TTTT OOOOOOOOOO\n`, where
 * TTTT names the stream (so a byte from another process shows) and the ten digits are the record's own byte
 * offset (so a lost, repeated or reordered range shows where it starts). A remote process prints it with awk,
 * the test computes the same bytes locally and compares sha256; on a mismatch `patternDivergence` says where.
 */

export const PATTERN_RECORD_BYTES = 16;
const TAG = /^[A-Za-z0-9]{4}$/;
const MAX_OFFSET = 9_999_999_999;

function checkArgs(tag: string, bytes: number): void {
  if (!TAG.test(tag)) throw new Error(`pattern tag must be 4 ASCII letters or digits, got ${JSON.stringify(tag)}`);
  if (!Number.isSafeInteger(bytes) || bytes < 0 || bytes % PATTERN_RECORD_BYTES !== 0 || bytes > MAX_OFFSET) {
    throw new Error(`pattern size must be a multiple of ${PATTERN_RECORD_BYTES} bytes, got ${bytes}`);
  }
}

/** The 16 bytes of the record at `offset` (a multiple of 16). */
export function patternRecord(tag: string, offset: number): string {
  return `${tag} ${String(offset).padStart(10, '0')}\n`;
}

/**
 * Writes the records for offsets [from, from + out.byteLength) into `out`, byte by byte (no strings: the
 * suite generates and checks hundreds of MiB, and a string per record costs seconds).
 */
function fillPattern(tagBytes: Buffer, out: Buffer, from: number): void {
  for (let at = 0; at < out.byteLength; at += PATTERN_RECORD_BYTES) {
    out[at] = tagBytes[0] as number;
    out[at + 1] = tagBytes[1] as number;
    out[at + 2] = tagBytes[2] as number;
    out[at + 3] = tagBytes[3] as number;
    out[at + 4] = 0x20;
    let value = from + at;
    for (let digit = 14; digit >= 5; digit--) {
      const next = Math.floor(value / 10);
      out[at + digit] = 0x30 + (value - next * 10);
      value = next;
    }
    out[at + 15] = 0x0a;
  }
}

/** The pattern's bytes [from, from + bytes) (`from` a multiple of 16; large streams go piece by piece). */
export function patternBytes(tag: string, bytes: number, from = 0): Buffer {
  checkArgs(tag, bytes);
  checkArgs(tag, from);
  const out = Buffer.allocUnsafe(bytes);
  fillPattern(Buffer.from(tag, 'latin1'), out, from);
  return out;
}

/** sha256 (hex) of the pattern's first `bytes` bytes, computed in 1 MiB pieces. */
export function patternSha256(tag: string, bytes: number): string {
  checkArgs(tag, bytes);
  const hash = createHash('sha256');
  const piece = 1024 * 1024;
  const buffer = Buffer.allocUnsafe(piece);
  const tagBytes = Buffer.from(tag, 'latin1');
  for (let start = 0; start < bytes; start += piece) {
    const view = buffer.subarray(0, Math.min(piece, bytes - start));
    fillPattern(tagBytes, view, start);
    hash.update(view);
  }
  return hash.digest('hex');
}

export interface PatternOptions {
  /** Pause `sleepSeconds` after every `everyBytes` (a producer slower than the network; awk flushes first). */
  pace?: { everyBytes: number; sleepSeconds: number };
}

/**
 * argv that prints the pattern on stdout (awk, present on every Linux box; one process, no shell). Checked
 * against `patternBytes` by the suite before it is trusted remotely.
 */
export function patternCommand(tag: string, bytes: number, options: PatternOptions = {}): string[] {
  checkArgs(tag, bytes);
  const records = bytes / PATTERN_RECORD_BYTES;
  const pace = options.pace;
  if (pace && (pace.everyBytes % PATTERN_RECORD_BYTES !== 0 || pace.everyBytes <= 0)) {
    throw new Error(`pace.everyBytes must be a positive multiple of ${PATTERN_RECORD_BYTES}`);
  }
  const every = pace ? pace.everyBytes / PATTERN_RECORD_BYTES : 0;
  const program = [
    'BEGIN {',
    `  for (i = 0; i < ${records}; i++) {`,
    `    printf "%s %010d\\n", "${tag}", i * ${PATTERN_RECORD_BYTES};`,
    pace ? `    if ((i + 1) % ${every} == 0) { fflush(); system("sleep ${pace.sleepSeconds}"); }` : '',
    '  }',
    '}',
  ].join('\n');
  return ['awk', program];
}

/**
 * Where `actual` first differs from the pattern, described for a failure message (lost, repeated or foreign
 * bytes show as an unexpected record), or null when it is the pattern's exact prefix of `expectedBytes`.
 */
export function patternDivergence(tag: string, expectedBytes: number, actual: Buffer): string | null {
  const limit = Math.min(actual.byteLength, expectedBytes);
  for (let offset = 0; offset < limit; offset += PATTERN_RECORD_BYTES) {
    const want = patternRecord(tag, offset);
    const got = actual.toString('latin1', offset, Math.min(offset + PATTERN_RECORD_BYTES, actual.byteLength));
    if (got !== want) {
      return `differs at byte ${offset}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`;
    }
  }
  if (actual.byteLength < expectedBytes) {
    return `short: ${actual.byteLength} of ${expectedBytes} bytes (the rest never arrived)`;
  }
  if (actual.byteLength > expectedBytes) return `long: ${actual.byteLength} bytes, expected ${expectedBytes}`;
  return null;
}

export interface PatternCheck {
  bytes: number;
  sha256: string;
  /** Null when the bytes are exactly the pattern of the expected size; else what is wrong, and where. */
  problem: string | null;
}

/**
 * Checks a stream against the pattern as it arrives, without keeping it: sha256 of everything, plus the first
 * and last whole record of every chunk against its position, so that a lost or repeated range is located to
 * within a chunk (the hash catches anything else).
 */
export class PatternVerifier {
  private readonly hash = createHash('sha256');
  private received = 0;
  private firstProblem: string | null = null;

  /** `expectedSha256`: the pattern's hash if already known (computing it costs about as much as checking). */
  constructor(
    readonly tag: string,
    readonly expectedBytes: number,
    private readonly expectedSha256?: string,
  ) {
    checkArgs(tag, expectedBytes);
  }

  get bytes(): number {
    return this.received;
  }

  update(chunk: Buffer): void {
    if (this.firstProblem === null) {
      const start = this.received;
      const firstRecord = Math.ceil(start / PATTERN_RECORD_BYTES) * PATTERN_RECORD_BYTES;
      const lastRecord =
        Math.floor((start + chunk.byteLength) / PATTERN_RECORD_BYTES) * PATTERN_RECORD_BYTES - PATTERN_RECORD_BYTES;
      for (const offset of firstRecord === lastRecord ? [firstRecord] : [firstRecord, lastRecord]) {
        if (offset < firstRecord || offset + PATTERN_RECORD_BYTES > start + chunk.byteLength) continue;
        const got = chunk.toString('latin1', offset - start, offset - start + PATTERN_RECORD_BYTES);
        const want = patternRecord(this.tag, offset);
        if (got !== want) {
          this.firstProblem = `at byte ${offset} (in a chunk of ${chunk.byteLength} from byte ${start}): expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`;
          break;
        }
      }
    }
    this.hash.update(chunk);
    this.received += chunk.byteLength;
  }

  finish(): PatternCheck {
    const sha256 = this.hash.digest('hex');
    let problem = this.firstProblem;
    if (problem === null && this.received !== this.expectedBytes) {
      problem = `${this.received} bytes arrived, expected ${this.expectedBytes}`;
    }
    if (problem === null && sha256 !== (this.expectedSha256 ?? patternSha256(this.tag, this.expectedBytes))) {
      problem = 'the size is right but the sha256 differs (bytes changed within a chunk)';
    }
    return { bytes: this.received, sha256, problem };
  }
}
