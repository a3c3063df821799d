// Standard base64 (RFC 4648 §4) with padding, pure JS so the codec runs without Buffer.
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const STRICT = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const LOOKUP = new Int16Array(128).fill(-1);
for (let i = 0; i < ALPHABET.length; i++) LOOKUP[ALPHABET.charCodeAt(i)] = i;

export function encodeBase64(bytes: Uint8Array): string {
  let out = '';
  let i = 0;
  for (; i + 2 < bytes.length; i += 3) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8) | bytes[i + 2]!;
    out += ALPHABET[n >> 18]! + ALPHABET[(n >> 12) & 63]! + ALPHABET[(n >> 6) & 63]! + ALPHABET[n & 63]!;
  }
  const left = bytes.length - i;
  if (left === 1) {
    const n = bytes[i]! << 16;
    out += `${ALPHABET[n >> 18]!}${ALPHABET[(n >> 12) & 63]!}==`;
  } else if (left === 2) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8);
    out += `${ALPHABET[n >> 18]!}${ALPHABET[(n >> 12) & 63]!}${ALPHABET[(n >> 6) & 63]!}=`;
  }
  return out;
}

/**
 * Decodes like Rust's `base64` STANDARD engine: alphabet A–Z a–z 0–9 + /, padding required, and
 * non-canonical trailing bits rejected. Returns null instead of throwing so callers name the field.
 */
export function decodeBase64Strict(text: string): Uint8Array | null {
  if (text.length % 4 !== 0 || !STRICT.test(text)) return null;
  const padding = text.endsWith('==') ? 2 : text.endsWith('=') ? 1 : 0;
  const out = new Uint8Array((text.length / 4) * 3 - padding);
  let o = 0;
  for (let i = 0; i < text.length; i += 4) {
    const a = LOOKUP[text.charCodeAt(i)]!;
    const b = LOOKUP[text.charCodeAt(i + 1)]!;
    const c = text[i + 2] === '=' ? 0 : LOOKUP[text.charCodeAt(i + 2)]!;
    const d = text[i + 3] === '=' ? 0 : LOOKUP[text.charCodeAt(i + 3)]!;
    const n = (a << 18) | (b << 12) | (c << 6) | d;
    if (o < out.length) out[o++] = n >> 16;
    if (o < out.length) out[o++] = (n >> 8) & 255;
    if (o < out.length) out[o++] = n & 255;
  }
  // Canonical form: the bits dropped by padding must be zero, i.e. re-encoding gives the same text.
  return encodeBase64(out) === text ? out : null;
}
