/** `node:buffer` in the browser bundle: the `buffer` package, and the one helper of Node's the client uses. */
export { Buffer } from 'buffer';

export function isAscii(bytes: Uint8Array): boolean {
  for (let i = 0; i < bytes.length; i++) if (bytes[i]! > 0x7f) return false;
  return true;
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

export function isUtf8(bytes: Uint8Array): boolean {
  try {
    strictUtf8.decode(bytes);
    return true;
  } catch {
    return false;
  }
}
