import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  constants,
  fstatSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MAX_BLOCK_BYTES } from '@tether/bytes';
import { afterEach, describe, expect, it } from 'vitest';
import { FileHandleTable } from './file-handles.js';
import { writeWholeFile } from './operations.js';
import { walk } from './walk.js';

const dirs: string[] = [];
const tables: FileHandleTable[] = [];

function scratch(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tether-fs-'));
  dirs.push(dir);
  return dir;
}

function table(limit?: number): FileHandleTable {
  const files = new FileHandleTable(limit);
  tables.push(files);
  return files;
}

afterEach(async () => {
  await Promise.all(tables.splice(0).map((t) => t.closeAll()));
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe('FileHandleTable', () => {
  it('reads blocks from the descriptor it opened: no re-open per block', async () => {
    const dir = scratch();
    const path = join(dir, 'f');
    writeFileSync(path, 'abcdefgh');
    const files = table();
    await files.open('h', path, 'read');
    // Unlinking the name proves the reads use the open descriptor, not the path.
    unlinkSync(path);
    expect(await files.readBlock('h', 0, 3)).toEqual({ chunk: Buffer.from('abc'), eof: false });
    expect(await files.readBlock('h', 6, 3)).toEqual({ chunk: Buffer.from('gh'), eof: true });
  });

  it('puts up to 16 read blocks ahead of the digest back in order; one more ends the digest', async () => {
    const dir = scratch();
    const path = join(dir, 'f');
    const data = Buffer.from(Array.from({ length: 18 * 10 }, (_, i) => i & 0xff));
    writeFileSync(path, data);
    const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');
    const files = table();
    for (const [id, ahead] of [
      ['fits', 16],
      ['over', 17],
    ] as const) {
      await files.open(id, path, 'read', true);
      for (let block = ahead; block >= 1; block--) await files.readBlock(id, block * 10, 10);
      await files.readBlock(id, 0, 10); // the gap fills last
      const expected = data.subarray(0, (ahead + 1) * 10);
      expect(await files.close(id)).toEqual(
        id === 'fits' ? { sha256: sha256(expected), bytes: expected.length } : null,
      );
    }
    // Without `digest` at open nothing is hashed.
    await files.open('plain', path, 'read');
    await files.readBlock('plain', 0, 10);
    expect(await files.close('plain')).toBeNull();
  });

  it('reads into a caller buffer, and the digest keeps its own copy of a block read ahead', async () => {
    const dir = scratch();
    const path = join(dir, 'f');
    const data = Buffer.from(Array.from({ length: 30 }, (_, i) => i + 1));
    writeFileSync(path, data);
    const files = table();
    await files.open('h', path, 'read', true);
    // One buffer for every read, as the handler's pool may hand out: each read overwrites the last.
    const buffer = Buffer.alloc(10);
    const ahead = await files.readBlock('h', 10, 10, buffer);
    expect(ahead.chunk.buffer).toBe(buffer.buffer);
    await files.readBlock('h', 20, 10, buffer);
    await files.readBlock('h', 0, 10, buffer); // fills the gap: the parked blocks are hashed now
    expect(buffer.equals(data.subarray(0, 10))).toBe(true);
    expect(await files.close('h')).toEqual({
      sha256: createHash('sha256').update(data).digest('hex'),
      bytes: data.length,
    });
  });

  it('runs the writes of a handle one at a time, blocks in any order landing where they belong', async () => {
    const dir = scratch();
    const path = join(dir, 'f');
    const files = table();
    await files.open('w', path, 'replace');
    const blocks = Array.from({ length: 8 }, (_, i) => Buffer.alloc(1000, i + 1));
    const order = [5, 0, 7, 2, 1, 6, 3, 4];
    await Promise.all(order.map((i) => files.writeBlock('w', i * 1000, blocks[i] as Buffer)));
    await files.close('w');
    expect(readFileSync(path).equals(Buffer.concat(blocks))).toBe(true);
  });

  it('counts opens in flight against the limit and as duplicates', async () => {
    const dir = scratch();
    writeFileSync(join(dir, 'f'), 'x');
    const files = table(2);
    const results = await Promise.allSettled([
      files.open('a', join(dir, 'f'), 'read'),
      files.open('a', join(dir, 'f'), 'read'),
      files.open('b', join(dir, 'f'), 'read'),
      files.open('c', join(dir, 'f'), 'read'),
    ]);
    expect(results.map((r) => (r.status === 'fulfilled' ? 'ok' : (r.reason as Error).message))).toEqual([
      'ok',
      'file handle `a` already exists',
      'ok',
      'at most 2 file handles may be open per connection',
    ]);
    expect(files.size).toBe(2);
  });

  it('a failed open leaves no handle behind', async () => {
    const dir = scratch();
    const files = table(1);
    await expect(files.open('a', join(dir, 'missing'), 'read')).rejects.toMatchObject({ code: -32004 });
    await expect(files.open('a', dir, 'read')).rejects.toMatchObject({ code: -32600 });
    expect(files.size).toBe(0);
    writeFileSync(join(dir, 'f'), 'x');
    await files.open('a', join(dir, 'f'), 'read');
  });

  it('writes a large file block by block in any order, holding one block at a time', async () => {
    const dir = scratch();
    const path = join(dir, 'out');
    const files = table();
    await files.open('w', path, 'replace');
    const blocks = 6;
    const expected = Buffer.alloc(blocks * MAX_BLOCK_BYTES);
    // Last block first: positional writes do not depend on arrival order.
    for (let i = blocks - 1; i >= 0; i--) {
      const block = Buffer.alloc(MAX_BLOCK_BYTES, i + 1);
      block.copy(expected, i * MAX_BLOCK_BYTES);
      await files.writeBlock('w', i * MAX_BLOCK_BYTES, block);
    }
    await expect(files.writeBlock('w', 0, Buffer.alloc(MAX_BLOCK_BYTES + 1))).rejects.toThrow(
      'file write block length must be between 1 and 1048576',
    );
    await files.close('w');
    expect(readFileSync(path).equals(expected)).toBe(true);
  });

  it('refuses to open a FIFO for writing instead of blocking on it', async () => {
    const dir = scratch();
    execFileSync('mkfifo', [join(dir, 'fifo')]);
    const files = table();
    for (const mode of ['replace', 'update', 'overwrite', 'read'] as const) {
      await expect(files.open(mode, join(dir, 'fifo'), mode)).rejects.toMatchObject({
        code: -32600,
        message: `path \`${join(dir, 'fifo')}\` is not a file`,
      });
    }
    await expect(writeWholeFile(join(dir, 'fifo'), Buffer.from('x'))).rejects.toMatchObject({ code: -32600 });
  });

  it('a failed read closes the handle, a failed write does not', async () => {
    const dir = scratch();
    const files = table();
    await files.open('w', join(dir, 'f'), 'replace');
    await expect(files.readBlock('w', 0, 1)).rejects.toMatchObject({
      code: -32603,
      message: 'Bad file descriptor (os error 9)',
    });
    expect(files.size).toBe(0);
    await files.open('r', join(dir, 'f'), 'read');
    await expect(files.writeBlock('r', 0, Buffer.from('x'))).rejects.toMatchObject({ code: -32603 });
    expect(await files.readBlock('r', 0, 1)).toEqual({ chunk: Buffer.alloc(0), eof: true });
    // Bounds are checked before any I/O and leave the handle alone.
    await expect(files.readBlock('r', 0, 0)).rejects.toMatchObject({ code: -32600 });
    expect(files.size).toBe(1);
  });

  it('with a descriptor the sandbox opened, uses that file, not the path, and closes the descriptor', async () => {
    const dir = scratch();
    const [opened, other] = ['opened', 'named'].map((name) => join(dir, name)) as [string, string];
    writeFileSync(opened, 'the sandbox opened this');
    writeFileSync(other, 'the path names this now');
    const files = table();
    const fd = openSync(opened, 'r');
    await files.open('r', other, 'read', false, fd);
    expect(() => fstatSync(fd)).toThrow(expect.objectContaining({ code: 'EBADF' }));
    expect((await files.readBlock('r', 0, 64)).chunk.toString()).toBe('the sandbox opened this');
    // A write handle writes through it too, and the path's file is left alone; a refused open closes it as well.
    const writable = openSync(opened, 'w');
    await files.open('w', other, 'replace', false, writable);
    await files.writeBlock('w', 0, Buffer.from('written'));
    await files.close('w');
    expect([readFileSync(opened, 'utf8'), readFileSync(other, 'utf8')]).toEqual(['written', 'the path names this now']);
    const again = openSync(opened, 'r');
    await expect(files.open('r', other, 'read', false, again)).rejects.toMatchObject({ code: -32600 });
    expect(() => fstatSync(again)).toThrow(expect.objectContaining({ code: 'EBADF' }));
    // Only a regular file is kept, and nothing sent can block the open: a FIFO with no writer is refused at once.
    const fifo = join(dir, 'fifo');
    execFileSync('mkfifo', [fifo]);
    const pipeEnd = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
    await expect(files.open('p', fifo, 'read', false, pipeEnd)).rejects.toMatchObject({
      code: -32600,
      message: `path \`${fifo}\` is not a file`,
    });
  });

  it('overwrite writes in place and cuts the file at the furthest byte written when it closes', async () => {
    const dir = scratch();
    const path = join(dir, 'f');
    writeFileSync(path, 'old contents, longer than the new');
    const inode = statSync(path).ino;
    const files = table();
    await files.open('o', path, 'overwrite');
    // Nothing is cut at open: the old tail is still there while the handle writes.
    expect(readFileSync(path, 'utf8')).toBe('old contents, longer than the new');
    await files.writeBlock('o', 4, Buffer.from('CONTENTS'));
    await files.writeBlock('o', 0, Buffer.from('NEW '));
    expect(readFileSync(path, 'utf8')).toBe('NEW CONTENTS, longer than the new');
    await files.close('o');
    expect(readFileSync(path, 'utf8')).toBe('NEW CONTENTS');
    expect(statSync(path).ino).toBe(inode); // the same file, not a replacement
    // A longer write extends the file; a handle that wrote nothing leaves it empty, as replace would.
    await files.open('o', path, 'overwrite');
    await files.writeBlock('o', 0, Buffer.from('0123456789abc'));
    await files.close('o');
    expect(readFileSync(path, 'utf8')).toBe('0123456789abc');
    await files.open('o', path, 'overwrite');
    await files.close('o');
    expect(readFileSync(path, 'utf8')).toBe('');
    // Absent files are created; a directory is refused like replace.
    await files.open('n', join(dir, 'new'), 'overwrite');
    await files.writeBlock('n', 0, Buffer.from('x'));
    await files.close('n');
    expect(readFileSync(join(dir, 'new'), 'utf8')).toBe('x');
    await expect(files.open('d', dir, 'overwrite')).rejects.toMatchObject({ code: -32603 });
    expect(files.size).toBe(0);
  });

  it('an overwrite handle left open is cut where its writes ended when the connection ends', async () => {
    const dir = scratch();
    const path = join(dir, 'f');
    writeFileSync(path, 'x'.repeat(100));
    const files = table();
    await files.open('o', path, 'overwrite');
    await files.open('u', join(dir, 'g'), 'update');
    await files.writeBlock('o', 0, Buffer.from('partial'));
    const pending = files.writeBlock('o', 7, Buffer.from('+more'));
    await files.closeAll(); // the write in flight lands before the cut
    await pending;
    expect(readFileSync(path, 'utf8')).toBe('partial+more');
    expect(files.size).toBe(0);
  });

  it('closing a handle lets its queued writes land first', async () => {
    const dir = scratch();
    const files = table();
    await files.open('w', join(dir, 'f'), 'replace');
    const blocks = [0, 1, 2, 3].map((i) => Buffer.alloc(256 * 1024, 0x61 + i));
    const writes = blocks.map((block, i) => files.writeBlock('w', i * block.length, block));
    await files.close('w'); // the writes after the first are still waiting their turn
    await Promise.all(writes);
    expect(readFileSync(join(dir, 'f')).equals(Buffer.concat(blocks))).toBe(true);
  });

  it('closeAll closes every handle and refuses new opens', async () => {
    const dir = scratch();
    writeFileSync(join(dir, 'f'), 'x');
    const files = table();
    await files.open('a', join(dir, 'f'), 'read');
    await files.open('b', join(dir, 'g'), 'replace');
    await files.closeAll();
    expect(files.size).toBe(0);
    await expect(files.readBlock('a', 0, 1)).rejects.toMatchObject({ code: -32004 });
    await expect(files.open('c', join(dir, 'f'), 'read')).rejects.toThrow('connection is closing');
  });
});

describe('walk', () => {
  it('follows a link cycle once', async () => {
    const dir = scratch();
    symlinkSync('.', join(dir, 'self'));
    writeFileSync(join(dir, 'f'), '');
    const result = await walk(dir, {
      maxDepth: 50,
      maxDirectories: 1000,
      maxEntries: 1000,
      followDirectorySymlinks: true,
    });
    expect(result.entries.map((e) => `${e.kind}:${e.path.split('/').pop()}`)).toEqual(['file:f', 'directory:self']);
    expect(result.truncated).toBe(false);
  });

  it('caps the entries of one answer whatever the client asks', async () => {
    const dir = scratch();
    for (const name of ['a', 'b', 'c']) writeFileSync(join(dir, name), '');
    const options = { maxDepth: 1, maxDirectories: 10, maxEntries: 1_000_000_000, followDirectorySymlinks: false };
    const capped = await walk(dir, options, 2);
    expect(capped.entries.map((e) => e.path.split('/').pop())).toEqual(['a', 'b']);
    expect(capped.truncated).toBe(true);
    expect((await walk(dir, options)).entries).toHaveLength(3);
  });
});
