// fs/* handles (open, blocks, close), walks and sandboxed fs calls against both executors (every peer × transport). Expectations are what Codex 0.171.0 answers
// (CODEX-FINDINGS.md §15); where Tether deliberately differs the test says so and asserts both sides.
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { b64, decodeB64, fileUri } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { errorOf, NOT_FOUND, scratchDirs } from './fs-support.ts';
import { CASES, resumeWhenDetached, useHarness } from './support.ts';

const walkOptions = (extra: Record<string, unknown> = {}) => ({
  maxDepth: 9,
  maxDirectories: 100,
  maxEntries: 100,
  followDirectorySymlinks: false,
  ...extra,
});

describe.each(CASES)('fs handles, walks: %s', (label, { kind, transport }) => {
  const h = useHarness();
  const scratch = scratchDirs(h, label);

  it('open, readBlock and close: blocks, eof, limits, unknown handles', async () => {
    const dir = scratch();
    const { client } = await h.session(kind, transport);
    const data = Buffer.alloc(3 * 1024 * 1024 + 10);
    for (let i = 0; i < data.length; i++) data[i] = (i * 7) & 0xff;
    writeFileSync(join(dir, 'data'), data);
    writeFileSync(join(dir, 'hello'), 'hello');
    expect(await client.call('fs/open', { handleId: 'h', path: fileUri(join(dir, 'hello')) })).toEqual({
      handleId: 'h',
    });
    const block = (handleId: string, offset: number, len: number) =>
      client.call<{ chunk: string; eof: boolean }>('fs/readBlock', { handleId, offset, len });
    expect(await block('h', 0, 2)).toEqual({ chunk: b64('he'), eof: false });
    expect(await block('h', 1, 2)).toEqual({ chunk: b64('el'), eof: false });
    // eof means a short block: exactly reaching the end is not eof.
    expect(await block('h', 0, 5)).toEqual({ chunk: b64('hello'), eof: false });
    expect(await block('h', 3, 10)).toEqual({ chunk: b64('lo'), eof: true });
    expect(await block('h', 100, 2)).toEqual({ chunk: '', eof: true });
    // The handle stays open after eof.
    expect(await block('h', 0, 1)).toEqual({ chunk: b64('h'), eof: false });
    const bounds = { code: -32600, message: 'file read block length must be between 1 and 1048576' };
    expect(await errorOf(client, 'fs/readBlock', { handleId: 'h', offset: 0, len: 0 })).toEqual(bounds);
    expect(await errorOf(client, 'fs/readBlock', { handleId: 'h', offset: 0, len: 1048577 })).toEqual(bounds);
    expect(await errorOf(client, 'fs/open', { handleId: 'h', path: fileUri(join(dir, 'hello')) })).toEqual({
      code: -32600,
      message: 'file handle `h` already exists',
    });

    // A large file read in 1 MiB blocks on one handle.
    await client.call('fs/open', { handleId: 'big', path: fileUri(join(dir, 'data')) });
    const parts: Buffer[] = [];
    for (let offset = 0; ; offset += 1048576) {
      const { chunk, eof } = await block('big', offset, 1048576);
      parts.push(decodeB64(chunk));
      if (eof) break;
    }
    expect(Buffer.concat(parts).equals(data)).toBe(true);

    expect(await client.call('fs/close', { handleId: 'big' })).toEqual({});
    expect(await client.call('fs/close', { handleId: 'big' })).toEqual({});
    expect(await client.call('fs/close', { handleId: 'never-opened' })).toEqual({});
    const unknown = { code: -32004, message: 'unknown file handle `big`' };
    expect(await errorOf(client, 'fs/readBlock', { handleId: 'big', offset: 0, len: 1 })).toEqual(unknown);

    expect(await errorOf(client, 'fs/open', { handleId: 'd', path: fileUri(dir) })).toEqual({
      code: -32600,
      message: `path \`${dir}\` is not a file`,
    });
    expect(await errorOf(client, 'fs/open', { handleId: 'd', path: fileUri(join(dir, 'nope')) })).toEqual(NOT_FOUND);
    expect(await errorOf(client, 'fs/open', { handleId: 'x'.repeat(33), path: fileUri(join(dir, 'hello')) })).toEqual({
      code: -32600,
      message: 'file handle ID must not exceed 32 bytes',
    });
    expect(await client.call('fs/open', { handleId: 'x'.repeat(32), path: fileUri(join(dir, 'hello')) })).toEqual({
      handleId: 'x'.repeat(32),
    });
    expect(await errorOf(client, 'fs/open', { path: fileUri(join(dir, 'hello')) })).toEqual({
      code: -32602,
      message: 'missing field `handleId`',
    });
  });

  it('handle limit: 128 open handles per connection', async () => {
    const dir = scratch();
    const { client } = await h.session(kind, transport);
    writeFileSync(join(dir, 'f'), 'x');
    const path = fileUri(join(dir, 'f'));
    const opened = await Promise.all(
      Array.from({ length: 128 }, (_, i) => client.request('fs/open', { handleId: `k${i}`, path })),
    );
    expect(opened.every((response) => response.error === undefined)).toBe(true);
    const full = { code: -32600, message: 'at most 128 file handles may be open per connection' };
    expect(await errorOf(client, 'fs/open', { handleId: 'one-more', path })).toEqual(full);
    await client.call('fs/close', { handleId: 'k5' });
    expect(await client.call('fs/open', { handleId: 'one-more', path })).toEqual({ handleId: 'one-more' });
    expect(await errorOf(client, 'fs/open', { handleId: 'two-more', path })).toEqual(full);
  });

  it('streaming write: fs/open mode replace + fs/writeBlock (fileWriteStreaming)', async () => {
    const dir = scratch();
    const { client, initializeResult } = await h.session(kind, transport);
    const capabilities = (initializeResult.environmentInfo as { capabilities: Record<string, boolean> }).capabilities;
    expect(capabilities.fileWriteStreaming).toBe(true);
    writeFileSync(join(dir, 'old'), 'OLD CONTENT THAT IS LONG');
    const path = fileUri(join(dir, 'old'));
    expect(await client.call('fs/open', { handleId: 'w', path, mode: 'replace' })).toEqual({ handleId: 'w' });
    // Truncated at open.
    expect(readFileSync(join(dir, 'old'), 'utf8')).toBe('');
    const write = (offset: number, chunk: string) => client.call('fs/writeBlock', { handleId: 'w', offset, chunk });
    expect(await write(0, b64('hello'))).toEqual({});
    expect(await write(5, b64(' world'))).toEqual({});
    expect(await write(5, b64(' world'))).toEqual({}); // positional: a repeat rewrites the same bytes
    expect(await write(20, b64('!'))).toEqual({}); // a gap reads as zeros
    expect(readFileSync(join(dir, 'old'))).toEqual(
      Buffer.concat([Buffer.from('hello world'), Buffer.alloc(9), Buffer.from('!')]),
    );
    expect(await errorOf(client, 'fs/writeBlock', { handleId: 'w', offset: 0, chunk: '!!' })).toEqual({
      code: -32602,
      message: 'Invalid symbol 33, offset 0.',
    });
    expect(await errorOf(client, 'fs/writeBlock', { handleId: 'w', offset: 0, chunk: '' })).toEqual({
      code: -32600,
      message: 'file write block length must be between 1 and 1048576',
    });
    expect(await errorOf(client, 'fs/writeBlock', { handleId: 'w', offset: 0 })).toEqual({
      code: -32602,
      message: 'missing field `chunk`',
    });
    expect(await client.call('fs/close', { handleId: 'w' })).toEqual({});
    expect(await errorOf(client, 'fs/writeBlock', { handleId: 'w', offset: 0, chunk: 'aGk=' })).toEqual({
      code: -32004,
      message: 'unknown file handle `w`',
    });
    // A failed read closes its handle; a failed write does not.
    const badDescriptor = { code: -32603, message: 'Bad file descriptor (os error 9)' };
    await client.call('fs/open', { handleId: 'w2', path, mode: 'replace' });
    expect(await errorOf(client, 'fs/readBlock', { handleId: 'w2', offset: 0, len: 1 })).toEqual(badDescriptor);
    expect(await errorOf(client, 'fs/writeBlock', { handleId: 'w2', offset: 0, chunk: 'aGk=' })).toEqual({
      code: -32004,
      message: 'unknown file handle `w2`',
    });
    await client.call('fs/open', { handleId: 'r', path, mode: 'read' });
    expect(await errorOf(client, 'fs/writeBlock', { handleId: 'r', offset: 0, chunk: 'aGk=' })).toEqual(badDescriptor);
    expect(await client.call('fs/readBlock', { handleId: 'r', offset: 0, len: 1 })).toEqual({ chunk: '', eof: true });
    expect(
      await errorOf(client, 'fs/open', { handleId: 'n', path: fileUri(join(dir, 'no', 'x')), mode: 'replace' }),
    ).toEqual(NOT_FOUND);
    expect(await errorOf(client, 'fs/open', { handleId: 'n', path: fileUri(dir), mode: 'replace' })).toEqual({
      code: -32603,
      message: 'Is a directory (os error 21)',
    });
    expect(await errorOf(client, 'fs/open', { handleId: 'n', path, mode: 'append' })).toEqual({
      code: -32602,
      message:
        kind === 'codex'
          ? 'unknown variant `append`, expected `read` or `replace`'
          : 'unknown variant `append`, expected one of `read`, `replace`, `update`, `overwrite`',
    });
  });

  /**
   * fs/open of `file` in the Tether-only `mode`: Codex refuses the mode (it advertises no `capability`, answers
   * serde's error and leaves the file as it was), and then answers null; ours advertises `capability` and opens
   * the file as `handleId`, and answers the client.
   */
  async function openInTetherMode(mode: 'overwrite' | 'update', capability: string, handleId: string, file: string) {
    const { client, initializeResult } = await h.session(kind, transport);
    const capabilities = (initializeResult.environmentInfo as { capabilities: Record<string, boolean> }).capabilities;
    const before = readFileSync(file, 'utf8');
    const response = await client.request('fs/open', { handleId, path: fileUri(file), mode });
    if (kind === 'codex') {
      expect(capabilities[capability]).toBeUndefined();
      expect(response.error).toEqual({
        code: -32602,
        message: `unknown variant \`${mode}\`, expected \`read\` or \`replace\``,
      });
      expect(readFileSync(file, 'utf8')).toBe(before);
      return null;
    }
    expect(capabilities[capability]).toBe(true);
    expect(response.result).toEqual({ handleId });
    return client;
  }

  it('streaming write: a whole 1 MiB block as base64 lands byte for byte; a non-ASCII symbol near its end is refused and writes nothing', async () => {
    // The executor checks that a long text is ASCII a piece at a time; this symbol sits in the last piece.
    const dir = scratch();
    const { client } = await h.session(kind, transport);
    const block = Buffer.alloc(1024 * 1024);
    for (let i = 0; i < block.length; i++) block[i] = (i * 31 + (i >> 10)) & 0xff;
    const path = fileUri(join(dir, 'block'));
    await client.call('fs/open', { handleId: 'w', path, mode: 'replace' });
    const text = block.toString('base64');
    expect(await client.call('fs/writeBlock', { handleId: 'w', offset: 0, chunk: text })).toEqual({});
    const at = text.length - 10;
    const foreign = `${text.slice(0, at)}\u4141${text.slice(at + 1)}`;
    expect(await errorOf(client, 'fs/writeBlock', { handleId: 'w', offset: 1, chunk: foreign })).toEqual({
      code: -32602,
      message: `Invalid symbol 228, offset ${at}.`, // U+4141's first UTF-8 byte, 0xE4
    });
    expect(await client.call('fs/close', { handleId: 'w' })).toEqual({});
    expect(readFileSync(join(dir, 'block')).equals(block)).toBe(true);
  });

  it('Tether extension: fs/open mode overwrite writes in place and cuts at close (Codex refuses the mode)', async () => {
    const file = join(scratch(), 'target');
    writeFileSync(file, 'the previous contents of this file');
    const client = await openInTetherMode('overwrite', 'fileWriteOverwrite', 'o', file);
    if (!client) return;
    await client.call('fs/writeBlock', { handleId: 'o', offset: 0, chunk: b64('new') });
    expect(readFileSync(file, 'utf8')).toBe('new previous contents of this file');
    expect(await client.call('fs/close', { handleId: 'o' })).toEqual({});
    expect(readFileSync(file, 'utf8')).toBe('new');
  });

  it('Tether extension: fs/open mode update resumes a write without truncating (Codex refuses the mode)', async () => {
    const dir = scratch();
    writeFileSync(join(dir, 'partial'), 'first half|');
    const path = fileUri(join(dir, 'partial'));
    const client = await openInTetherMode('update', 'fileWriteUpdate', 'u', join(dir, 'partial'));
    if (!client) return;
    const { size } = await client.call<{ size: number }>('fs/getMetadata', { path });
    await client.call('fs/writeBlock', { handleId: 'u', offset: size, chunk: b64('second half') });
    await client.call('fs/close', { handleId: 'u' });
    expect(readFileSync(join(dir, 'partial'), 'utf8')).toBe('first half|second half');
    // Absent files are created; directories are refused.
    await client.call('fs/open', { handleId: 'new', path: fileUri(join(dir, 'fresh')), mode: 'update' });
    await client.call('fs/writeBlock', { handleId: 'new', offset: 0, chunk: b64('x') });
    expect(readFileSync(join(dir, 'fresh'), 'utf8')).toBe('x');
    expect(await errorOf(client, 'fs/open', { handleId: 'd', path: fileUri(dir), mode: 'update' })).toEqual({
      code: -32603,
      message: 'Is a directory (os error 21)',
    });
  });

  it('walk: breadth first, sorted, links and special files, limits', async () => {
    const dir = scratch();
    const { client } = await h.session(kind, transport);
    for (const d of ['a/b/c', 'z/y', '.hid']) mkdirSync(join(dir, d), { recursive: true });
    for (const f of ['a/f1', 'a/b/f2', 'a/b/c/f3', 'z/y/f5', '.hid/h', '.dot', 'B']) writeFileSync(join(dir, f), f);
    mkdirSync(join(dir, '..', `${dir.split('/').pop()}-outside`, 'o1'), { recursive: true });
    symlinkSync(`../${dir.split('/').pop()}-outside`, join(dir, 'lo'));
    symlinkSync('a', join(dir, 'linkdir'));
    symlinkSync('B', join(dir, 'linkfile'));
    symlinkSync('nowhere', join(dir, 'dangling'));
    symlinkSync('loop', join(dir, 'loop'));
    execFileSync('mkfifo', [join(dir, 'fifo')]);
    const walk = (options: Record<string, unknown>, path = fileUri(dir)) =>
      client.call<{ entries: { path: string; kind: string }[]; errors: unknown[]; truncated: boolean }>('fs/walk', {
        path,
        options: walkOptions(options),
      });
    const rel = (result: Awaited<ReturnType<typeof walk>>) =>
      result.entries.map((e) => `${e.kind === 'directory' ? 'd' : 'f'}:${e.path.slice(fileUri(dir).length + 1)}`);

    const all = await walk({});
    expect(rel(all)).toEqual([
      'f:.dot',
      'd:.hid',
      'f:B',
      'd:a',
      'd:z',
      'f:.hid/h',
      'd:a/b',
      'f:a/f1',
      'd:z/y',
      'd:a/b/c',
      'f:a/b/f2',
      'f:z/y/f5',
      'f:a/b/c/f3',
    ]);
    expect(all.errors).toEqual([]);
    expect(all.truncated).toBe(false);

    // Following links: lo is descended; linkdir points at a, already walked, so it is listed only.
    const followed = await walk({ followDirectorySymlinks: true });
    expect(rel(followed)).toEqual([
      'f:.dot',
      'd:.hid',
      'f:B',
      'd:a',
      'd:linkdir',
      'd:lo',
      'd:z',
      'f:.hid/h',
      'd:a/b',
      'f:a/f1',
      'd:lo/o1',
      'd:z/y',
      'd:a/b/c',
      'f:a/b/f2',
      'f:z/y/f5',
      'f:a/b/c/f3',
    ]);
    expect(rel(await walk({ maxDepth: 0 }))).toEqual(['f:.dot', 'd:.hid', 'f:B', 'd:a', 'd:z']);
    expect((await walk({ maxDepth: 0 })).truncated).toBe(false);
    // maxEntries counts every entry whose type is readable (the fifo and live links too, listed or not).
    const first = await walk({ maxDepth: 0, maxEntries: 5 });
    expect(rel(first)).toEqual(['f:.dot', 'd:.hid', 'f:B', 'd:a']);
    expect(first.truncated).toBe(true);
    const exact = await walk({ maxDepth: 0, maxEntries: 9 });
    expect(rel(exact)).toEqual(['f:.dot', 'd:.hid', 'f:B', 'd:a', 'd:z']);
    expect(exact.truncated).toBe(false);
    const twoDirs = await walk({ maxDirectories: 2 });
    expect(rel(twoDirs)).toEqual(['f:.dot', 'd:.hid', 'f:B', 'd:a', 'd:z', 'f:.hid/h']);
    expect(twoDirs.truncated).toBe(true);

    expect(await walk({}, fileUri(join(dir, 'B')))).toEqual({ entries: [], errors: [], truncated: false });
    expect(await walk({}, fileUri(join(dir, 'linkdir')))).toEqual({ entries: [], errors: [], truncated: false });
    expect(await errorOf(client, 'fs/walk', { path: fileUri(join(dir, 'nope')), options: walkOptions() })).toEqual(
      NOT_FOUND,
    );
    expect(await errorOf(client, 'fs/walk', { path: fileUri(dir), options: walkOptions({ maxEntries: 0 }) })).toEqual({
      code: -32600,
      message: 'filesystem walk limits must be greater than zero',
    });
    expect(await errorOf(client, 'fs/walk', { path: fileUri(dir) })).toEqual({
      code: -32602,
      message: 'missing field `options`',
    });
    expect(await errorOf(client, 'fs/walk', { path: fileUri(dir), options: 'x' })).toEqual({
      code: -32602,
      message: 'invalid type: string "x", expected struct WalkOptions',
    });
    expect(await errorOf(client, 'fs/walk', { path: fileUri(dir), options: { maxDepth: 1 } })).toEqual({
      code: -32602,
      message: 'missing field `maxDirectories`',
    });
    expect(await errorOf(client, 'fs/walk', { path: fileUri(dir), options: walkOptions({ maxEntries: 'x' }) })).toEqual(
      {
        code: -32602,
        message: 'invalid type: string "x", expected usize',
      },
    );
  });

  it('walk: an entry whose type cannot be read is an error item (a path beyond PATH_MAX)', async () => {
    const dir = scratch();
    const { client } = await h.session(kind, transport);
    const name = 'n'.repeat(250);
    // 17 nested 250-byte names: the deepest ones are only reachable relative to a chdir.
    execFileSync(process.execPath, [
      '-e',
      `process.chdir(${JSON.stringify(dir)}); const fs = require('node:fs');
       for (let i = 0; i < 17; i++) { fs.mkdirSync(${JSON.stringify(name)}); process.chdir(${JSON.stringify(name)}); fs.writeFileSync('f' + i, ''); }`,
    ]);
    const result = await client.call<{ entries: unknown[]; errors: unknown[]; truncated: boolean }>('fs/walk', {
      path: fileUri(dir),
      options: walkOptions({ maxDepth: 30 }),
    });
    // Level k holds file f(k-1) and level k+1. Paths longer than 4095 bytes cannot be lstat-ed.
    const level = (k: number) => join(dir, ...Array<string>(k).fill(name));
    const levels = Math.floor((4095 - dir.length) / 251);
    const tooLong = 'Filename too long (os error 36)';
    const lastFile = join(level(levels), `f${levels - 1}`);
    const lastFileFits = lastFile.length <= 4095;
    expect(result.entries).toHaveLength(2 * levels - (lastFileFits ? 0 : 1));
    expect(result.errors).toEqual([
      ...(lastFileFits ? [] : [{ path: fileUri(lastFile), message: tooLong }]),
      { path: fileUri(level(levels + 1)), message: tooLong },
    ]);
    expect(result.truncated).toBe(false);
    execFileSync('rm', ['-rf', dir]);
  });

  it('sandbox: unrestricted profiles run, malformed ones fail decoding, restricted ones are never ignored', async () => {
    const dir = scratch();
    const { client } = await h.session(kind, transport);
    writeFileSync(join(dir, 'f'), 'secret');
    const path = fileUri(join(dir, 'f'));
    const read = (sandbox: unknown) => client.request('fs/readFile', { path, sandbox });
    for (const sandbox of [
      null,
      { permissions: { type: 'disabled' }, windowsSandboxLevel: 'disabled' },
      { permissions: { type: 'external', network: 'restricted' }, windowsSandboxLevel: 'disabled' },
      {
        permissions: { type: 'managed', file_system: { type: 'unrestricted' }, network: 'restricted' },
        windowsSandboxLevel: 'disabled',
      },
    ]) {
      expect((await read(sandbox)).result).toEqual({ dataBase64: b64('secret') });
    }
    expect((await read({})).error).toEqual({ code: -32602, message: 'missing field `permissions`' });
    expect((await read({ permissions: {} })).error).toEqual({ code: -32602, message: 'missing field `type`' });
    expect((await read('x')).error).toEqual({
      code: -32602,
      message: 'invalid type: string "x", expected struct WireFileSystemSandboxContext',
    });
    expect((await read({ permissions: { type: 'x' } })).error).toEqual({
      code: -32602,
      message: 'unknown variant `x`, expected one of `managed`, `disabled`, `external`',
    });
    expect((await read({ permissions: { type: 'disabled' }, windowsSandboxLevel: 'x' })).error).toEqual({
      code: -32602,
      message: 'unknown variant `x`, expected one of `disabled`, `restricted-token`, `elevated`, `mxc`',
    });
    const restricted = {
      permissions: { type: 'managed', file_system: { type: 'restricted', entries: [] }, network: 'restricted' },
      windowsSandboxLevel: 'disabled',
    };
    const response = await read(restricted);
    expect(response.result).toBeUndefined();
    // Both run the read in a sandboxed helper, where nothing is visible (sandbox.test.ts has the whole table).
    expect(response.error).toEqual(NOT_FOUND);
    const written = await client.request('fs/writeFile', { path, dataBase64: b64('x'), sandbox: restricted });
    expect(written.result).toBeUndefined();
    expect(readFileSync(join(dir, 'f'), 'utf8')).toBe('secret');
  });

  if (transport === 'ws') {
    it('handles belong to the connection: a resumed session does not inherit them', async () => {
      const dir = scratch();
      const { peer, client, sessionId } = await h.session(kind, transport);
      writeFileSync(join(dir, 'f'), 'abc');
      await client.call('fs/open', { handleId: 'kept?', path: fileUri(join(dir, 'f')) });
      client.terminate();
      const resumed = await resumeWhenDetached(h, peer, sessionId, 'fs-resume');
      expect(await errorOf(resumed, 'fs/readBlock', { handleId: 'kept?', offset: 0, len: 1 })).toEqual({
        code: -32004,
        message: 'unknown file handle `kept?`',
      });
    });
  }
});
