import { closeSync, fstatSync, openSync, readSync } from 'node:fs';

/**
 * A random UUID (version 4, the form crypto.randomUUID gives) from the OS's randomness, read from /dev/urandom:
 * loading node:crypto (or the global `crypto`) for one id cost `harness exec` about 10 ms of its start on Node 24,
 * and a command served by a connection master needs node:crypto for nothing else. Where /dev/urandom is not a
 * character device that gives 16 bytes (Windows, an odd chroot), crypto.randomUUID.
 */
export function randomUuid(): string {
  const bytes = Buffer.alloc(16);
  let fd: number | null = null;
  try {
    fd = openSync('/dev/urandom', 'r');
    if (!fstatSync(fd).isCharacterDevice() || readSync(fd, bytes, 0, 16, null) !== 16) return crypto.randomUUID();
  } catch {
    return crypto.randomUUID();
  } finally {
    if (fd !== null) closeSync(fd);
  }
  bytes[6] = ((bytes[6] as number) & 0x0f) | 0x40; // version 4
  bytes[8] = ((bytes[8] as number) & 0x3f) | 0x80; // RFC 9562 variant
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
