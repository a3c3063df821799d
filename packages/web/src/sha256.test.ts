import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { formatBytes, formatRate, Sha256 } from './sha256.js';

const reference = (data: Uint8Array) => createHash('sha256').update(data).digest('hex');

describe('Sha256', () => {
  it('matches the FIPS 180-4 examples', () => {
    expect(new Sha256().hex()).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
    expect(new Sha256().update(new TextEncoder().encode('abc')).hex()).toBe(
      'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad',
    );
  });

  it('gives the same digest however the bytes are cut into chunks', () => {
    const data = randomBytes(300_001);
    for (const cut of [1, 3, 55, 56, 63, 64, 65, 4096, 65_537, data.byteLength]) {
      const hash = new Sha256();
      for (let at = 0; at < data.byteLength; at += cut) hash.update(data.subarray(at, at + cut));
      expect(hash.hex(), `chunks of ${cut}`).toBe(reference(data));
    }
  });

  it('pads every length around a block boundary correctly', () => {
    for (let length = 0; length <= 130; length++) {
      const data = randomBytes(length);
      expect(new Sha256().update(data).hex(), `${length} bytes`).toBe(reference(data));
    }
  });

  it('takes no input once finished', () => {
    const hash = new Sha256();
    hash.hex();
    expect(() => hash.update(new Uint8Array(1))).toThrow(/already been finished/);
    expect(() => hash.hex()).toThrow(/already been finished/);
  });
});

describe('formatBytes and formatRate', () => {
  it('use decimal units with three significant digits', () => {
    expect(formatBytes(0)).toBe('0 B');
    expect(formatBytes(999)).toBe('999 B');
    expect(formatBytes(1500)).toBe('1.50 kB');
    expect(formatBytes(20_971_520)).toBe('21.0 MB');
    expect(formatRate(20_000_000, 2000)).toBe('10.0 MB/s');
    expect(formatRate(5, 0)).toBe('–');
  });
});
