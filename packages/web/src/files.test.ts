import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ByteGatherer, baseName, GATHER_RESERVE_LIMIT, remotePath, webCryptoSha256 } from './files.js';

describe('remotePath', () => {
  it('joins an absolute directory and a file name', () => {
    expect(remotePath('/tmp', 'a.bin')).toBe('/tmp/a.bin');
    expect(remotePath('/tmp///', 'a.bin')).toBe('/tmp/a.bin');
    expect(remotePath('/', 'a.bin')).toBe('/a.bin');
  });

  it('refuses a relative directory and names that are not one component', () => {
    expect(() => remotePath('tmp', 'a')).toThrow(/not an absolute path/);
    for (const name of ['', '.', '..', 'x/y']) expect(() => remotePath('/tmp', name)).toThrow(/not a file name/);
  });
});

describe('baseName', () => {
  it('is the last component, or "download" when there is none', () => {
    expect(baseName('/tmp/dir/file.txt')).toBe('file.txt');
    expect(baseName('/tmp/dir/')).toBe('dir');
    expect(baseName('/')).toBe('download');
  });
});

describe('ByteGatherer', () => {
  it('gathers appended bytes in order, growing past its first size', () => {
    for (const hint of [0, 3, 10, 1 << 20]) {
      const gathered = new ByteGatherer(hint);
      const parts = [Uint8Array.of(1, 2), new Uint8Array(0), Uint8Array.of(3), new Uint8Array(70_000).fill(9)];
      for (const part of parts) gathered.append(part);
      expect(gathered.length).toBe(70_003);
      const bytes = gathered.bytes();
      expect([...bytes.subarray(0, 4)]).toEqual([1, 2, 3, 9]);
      expect(bytes.subarray(3).every((b) => b === 9)).toBe(true);
    }
  });

  it('reserves no more than its limit for a size hint, and nothing for one that is not a size', () => {
    expect(new ByteGatherer(1000).capacity).toBe(1000);
    expect(new ByteGatherer(Number.MAX_SAFE_INTEGER).capacity).toBe(GATHER_RESERVE_LIMIT);
    for (const hint of [-5, Number.NaN, Number.POSITIVE_INFINITY, 1.5]) expect(new ByteGatherer(hint).capacity).toBe(0);
  });
});

describe('webCryptoSha256', () => {
  it('is the hex SHA-256 of the bytes', async () => {
    const data = new TextEncoder().encode('abc');
    expect(await webCryptoSha256(data)).toBe(createHash('sha256').update(data).digest('hex'));
    expect(await webCryptoSha256(new Uint8Array(0))).toBe(createHash('sha256').digest('hex'));
  });
});
