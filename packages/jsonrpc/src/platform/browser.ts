/** `#platform` in a browser build: node:buffer's `isAscii` in JavaScript (a word at a time would gain little here). */
export function isAscii(bytes: Uint8Array): boolean {
  for (let i = 0; i < bytes.length; i++) if ((bytes[i] as number) > 0x7f) return false;
  return true;
}
