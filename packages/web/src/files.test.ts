import { describe, expect, it } from 'vitest';
import { baseName, remotePath } from './files.js';

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
