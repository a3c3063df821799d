// Standard base64 with padding (RFC 4648 §4), the only form on the wire.
const STRICT_BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

export function encodeBase64(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
}

export function isStrictBase64(text: string): boolean {
  return text.length % 4 === 0 && STRICT_BASE64.test(text);
}

/** Decodes strict padded base64; throws a TypeError naming the problem otherwise. */
export function decodeBase64(text: string): Buffer {
  if (!isStrictBase64(text)) {
    throw new TypeError('invalid base64: expected standard alphabet with padding');
  }
  return Buffer.from(text, 'base64');
}
