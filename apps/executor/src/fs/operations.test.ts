import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { copy, readDirectory, readWholeFile } from './operations.js';

const dirs: string[] = [];
function scratch(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tether-fs-ops-'));
  dirs.push(dir);
  return dir;
}
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe('readDirectory', () => {
  it('follows links for the kinds and leaves dangling ones out, as Codex; with links (directoryLinks) marks them', async () => {
    const dir = scratch();
    writeFileSync(join(dir, 'file'), 'x');
    mkdirSync(join(dir, 'sub'));
    symlinkSync('file', join(dir, 'to-file'));
    symlinkSync('sub', join(dir, 'to-sub'));
    symlinkSync('nowhere', join(dir, 'dangling'));
    const byName = (entries: Awaited<ReturnType<typeof readDirectory>>) =>
      [...entries].sort((a, b) => a.fileName.localeCompare(b.fileName));
    expect(byName(await readDirectory(dir))).toEqual([
      { fileName: 'file', isDirectory: false, isFile: true },
      { fileName: 'sub', isDirectory: true, isFile: false },
      { fileName: 'to-file', isDirectory: false, isFile: true },
      { fileName: 'to-sub', isDirectory: true, isFile: false },
    ]);
    expect(byName(await readDirectory(dir, true))).toEqual([
      { fileName: 'dangling', isDirectory: false, isFile: false, isSymlink: true },
      { fileName: 'file', isDirectory: false, isFile: true, isSymlink: false },
      { fileName: 'sub', isDirectory: true, isFile: false, isSymlink: false },
      { fileName: 'to-file', isDirectory: false, isFile: true, isSymlink: true },
      { fileName: 'to-sub', isDirectory: true, isFile: false, isSymlink: true },
    ]);
  });
});

describe('readWholeFile', () => {
  it('returns files up to the limit and refuses larger ones', async () => {
    const dir = scratch();
    writeFileSync(join(dir, 'f'), 'abcd');
    expect((await readWholeFile(join(dir, 'f'), 4)).toString()).toBe('abcd');
    await expect(readWholeFile(join(dir, 'f'), 3)).rejects.toMatchObject({
      code: -32600,
      message: 'file is too large to read: limit is 3 bytes',
    });
    writeFileSync(join(dir, 'empty'), '');
    expect(await readWholeFile(join(dir, 'empty'), 0)).toEqual(Buffer.alloc(0));
  });

  it('points files too big for one answer (but within the limit) to fs/readBlock', async () => {
    const dir = scratch();
    writeFileSync(join(dir, 'f'), 'abcdef');
    await expect(readWholeFile(join(dir, 'f'), 100, 5)).rejects.toMatchObject({
      code: -32600,
      message: 'file is too large to read in one response: limit is 5 bytes; read it with fs/open and fs/readBlock',
    });
    // The configured limit is checked first, with Codex's wording.
    await expect(readWholeFile(join(dir, 'f'), 3, 5)).rejects.toMatchObject({
      message: 'file is too large to read: limit is 3 bytes',
    });
    expect((await readWholeFile(join(dir, 'f'), 100, 6)).toString()).toBe('abcdef');
  });

  it('refuses what is not a regular file, by native path', async () => {
    const dir = scratch();
    await expect(readWholeFile(dir, 10)).rejects.toMatchObject({
      code: -32600,
      message: `path \`${dir}\` is not a file`,
    });
    await expect(readWholeFile(join(dir, 'nope'), 10)).rejects.toMatchObject({
      code: -32004,
      message: 'No such file or directory (os error 2)',
    });
  });
});

describe('copy', () => {
  it('keeps a file copied onto itself intact', async () => {
    const dir = scratch();
    writeFileSync(join(dir, 'f'), 'precious');
    await copy(join(dir, 'f'), join(dir, 'f'), false);
    expect(readFileSync(join(dir, 'f'), 'utf8')).toBe('precious');
  });
});
