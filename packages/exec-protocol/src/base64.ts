// Standard base64 with padding (RFC 4648 §4), the only form on the wire: a length that is a multiple of 4,
// symbols of the standard alphabet, then at most two '='.

export function encodeBase64(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
}

/**
 * The bytes of `text` when it is strict padded base64, else null; one native decoding pass and no regex
 * (a regex over the alphabet ran at ≈ 6 ms per MiB of text, the decoder at well under 1).
 *
 * Node's decoder is lenient: it skips what is not in its alphabet and also takes the URL-safe `-` and
 * `_`. Skipped characters are what make strictness checkable: a text of length L ending in p '=' (p ≤ 2)
 * decodes to exactly 3L/4 - p bytes only if every other character is a symbol, since each of k ≥ 1
 * foreign characters (a '=' inside included) removes 6 of the 6(L - p) data bits, leaving fewer than
 * 8(3L/4 - p) of them. The URL-safe symbols, which would decode, are searched for (a native scan).
 */
function decodeStrict(text: string, allocate?: (size: number) => Buffer): Buffer | null {
  if (text.length % 4 !== 0) return null;
  const padding = text.endsWith('==') ? 2 : text.endsWith('=') ? 1 : 0;
  const expected = (text.length / 4) * 3 - padding;
  // Decoding never yields more than `expected` bytes (see above), so the target is never too short.
  const bytes = allocate ? allocate(expected) : Buffer.allocUnsafe(expected);
  // Node's decoder reads a UTF-16 unit by its low byte, so U+4141 would pass for `A`: the text must be ASCII,
  // checked before the target is decoded into (it serves as the check's scratch).
  if (!isAsciiText(text, bytes)) return null;
  if (bytes.write(text, 'base64') !== expected) return null;
  if (text.indexOf('-') !== -1 || text.indexOf('_') !== -1) return null;
  return bytes;
}

const encoder = new TextEncoder();

/**
 * True when every character of `text` is ASCII. It encodes the text as UTF-8 into `scratch`, a piece at a
 * time: a piece is ASCII exactly when as many bytes were written as characters read. That is a native
 * pass (simdutf); `Buffer.byteLength(text, 'utf8')`, which V8 counts character by character, took 0.39 ms
 * per 1 MiB block's text against 0.04–0.09 for this (Node 24, 2026-12-08), a tenth of the executor's
 * main thread on a run of `fs/writeBlock`s. `scratch` is not empty: decodeStrict's target holds at least one
 * byte for any text of four characters or more.
 */
function isAsciiText(text: string, scratch: Uint8Array): boolean {
  if (text.length === 0) return true;
  let rest = text;
  for (;;) {
    const { read, written } = encoder.encodeInto(rest, scratch);
    if (written !== read) return false;
    if (read === rest.length) return true;
    // The scratch filled up: a character wider than one byte (one did not fit), or only more text to come.
    if (read === 0) return false;
    rest = rest.slice(read);
  }
}

export function isStrictBase64(text: string): boolean {
  return decodeStrict(text) !== null;
}

/** Decodes strict padded base64; throws a TypeError naming the problem otherwise. */
export function decodeBase64(text: string): Buffer {
  const bytes = decodeStrict(text);
  if (bytes === null) throw new TypeError('invalid base64: expected standard alphabet with padding');
  return bytes;
}

const PAD = 0x3d; // '='

function morselOf(byte: number): number {
  if (byte >= 0x41 && byte <= 0x5a) return byte - 0x41; // A-Z
  if (byte >= 0x61 && byte <= 0x7a) return byte - 0x61 + 26; // a-z
  if (byte >= 0x30 && byte <= 0x39) return byte - 0x30 + 52; // 0-9
  if (byte === 0x2b) return 62; // +
  if (byte === 0x2f) return 63; // /
  return -1;
}

/**
 * Why `text` is not canonical padded standard base64, worded as Codex words it (the Rust `base64`
 * crate's STANDARD engine, whose decode errors Codex returns verbatim): `Invalid symbol 33, offset 0.`,
 * `Invalid padding`, `Invalid input length: 1`, `Invalid last symbol 70, offset 2.`. Null when valid.
 * Offsets are byte offsets of the UTF-8 text. The checks run in the crate's order: a stray last byte
 * first, then every complete quad except the last, then the final quad with its padding.
 */
export function base64Problem(text: string): string | null {
  // Fast path (native, no per-byte JS): canonical text is exactly what re-encoding its bytes gives.
  if (Buffer.from(text, 'base64').toString('base64') === text) return null;
  const input = Buffer.from(text, 'utf8');
  const rem = input.length % 4;
  if (rem === 1) {
    const last = input[input.length - 1]!;
    if (last !== PAD && morselOf(last) < 0) return invalidSymbol(last, input.length - 1);
  }
  // Every complete quad but the last is plain data: '=' there is an invalid symbol.
  const body = rem === 0 ? Math.max(0, input.length - 4) : input.length - rem;
  for (let i = 0; i < body; i++) {
    if (morselOf(input[i]!) < 0) return invalidSymbol(input[i]!, i);
  }
  let morsels = 0;
  let padding = 0;
  let firstPadding = 0;
  let lastSymbol = 0;
  const values: number[] = [];
  for (let i = body; i < input.length; i++) {
    const byte = input[i]!;
    const index = i - body;
    if (byte === PAD) {
      if (index < 2) return invalidSymbol(byte, i);
      if (padding === 0) firstPadding = index;
      padding++;
      continue;
    }
    if (padding > 0) return invalidSymbol(PAD, body + firstPadding);
    const value = morselOf(byte);
    if (value < 0) return invalidSymbol(byte, i);
    lastSymbol = byte;
    values.push(value);
    morsels++;
  }
  if (input.length > 0 && morsels < 2) return `Invalid input length: ${body + morsels}`;
  if ((padding + morsels) % 4 !== 0) return 'Invalid padding';
  // Bits of the last symbol that would be dropped must be zero (canonical encoding).
  const usedBits = Math.floor((morsels * 6) / 8) * 8;
  const totalBits = morsels * 6;
  const last = values[values.length - 1] ?? 0;
  const droppedBits = totalBits - usedBits;
  if (droppedBits > 0 && (last & ((1 << droppedBits) - 1)) !== 0) {
    return `Invalid last symbol ${lastSymbol}, offset ${body + morsels - 1}.`;
  }
  return null;
}

function invalidSymbol(byte: number, offset: number): string {
  return `Invalid symbol ${byte}, offset ${offset}.`;
}

/**
 * True when the bits that padding drops are zero (what makes padded base64 canonical): the last symbol
 * before `==` carries 2 data bits of 6, before `=` 4 of 6.
 */
function canonicalTail(text: string): boolean {
  if (text.endsWith('==')) return (morselOf(text.charCodeAt(text.length - 3)) & 0x0f) === 0;
  if (text.endsWith('=')) return (morselOf(text.charCodeAt(text.length - 2)) & 0x03) === 0;
  return true;
}

/**
 * Decodes canonical padded standard base64, throwing a TypeError with Codex's wording when it is not.
 * Valid means: strict alphabet and padding (`decodeStrict`, which decodes once) and zero dropped bits
 * (re-encoding to compare would cost another pass and a megabyte string per block). With `allocate`,
 * the bytes are decoded into the buffer it returns for the decoded length (a pooled one, say).
 */
export function decodeBase64Codex(text: string, allocate?: (size: number) => Buffer): Buffer {
  const bytes = decodeStrict(text, allocate);
  if (bytes !== null && canonicalTail(text)) return bytes;
  throw new TypeError(base64Problem(text) ?? 'Invalid padding');
}
