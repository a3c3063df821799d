// fs/* against both executors (every peer × transport). Expectations are what Codex 0.171.0 answers
// (CODEX-FINDINGS.md §15); where Tether deliberately differs the test says so and asserts both sides.
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { b64, decodeB64, fileUri } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { errorOf, NOT_FOUND, scratchDirs } from './fs-support.ts';
import { CASES, useHarness } from './support.ts';

describe.each(CASES)('fs: %s', (label, { kind, transport }) => {
  const h = useHarness();
  const scratch = scratchDirs(h, label);

  it('gates filesystem methods before initialized', async () => {
    const peer = await h.start(kind, transport);
    const client = await h.connect(peer);
    expect(await errorOf(client, 'fs/readFile', { path: fileUri('/etc/hostname') })).toEqual({
      code: -32600,
      message: 'client must call initialize before using filesystem methods',
    });
  });

  it('fs/getMetadataBatch (in some Codex versions, not 0.171.0) is an unknown method on both', async () => {
    const { client } = await h.session(kind, transport);
    expect(await errorOf(client, 'fs/getMetadataBatch', { paths: [fileUri('/tmp')] })).toEqual({
      code: -32601,
      message: 'exec-server stub does not implement `fs/getMetadataBatch` yet',
    });
  });

  it('writeFile, readFile, getMetadata, canonicalize, readDirectory', async () => {
    const dir = scratch();
    const { client } = await h.session(kind, transport);
    const bytes = Buffer.from([0, 1, 2, 250, 255, 10, 13]);
    expect(await client.call('fs/writeFile', { path: fileUri(join(dir, 'a.bin')), dataBase64: b64(bytes) })).toEqual(
      {},
    );
    expect(readFileSync(join(dir, 'a.bin'))).toEqual(bytes);
    const read = await client.call<{ dataBase64: string }>('fs/readFile', { path: fileUri(join(dir, 'a.bin')) });
    expect(decodeB64(read.dataBase64)).toEqual(bytes);
    // An empty file and a file name that needs percent-encoding.
    await client.call('fs/writeFile', { path: fileUri(join(dir, 'sp ace é')), dataBase64: '' });
    expect(await client.call('fs/readFile', { path: fileUri(join(dir, 'sp ace é')) })).toEqual({ dataBase64: '' });

    const meta = await client.call<Record<string, unknown>>('fs/getMetadata', { path: fileUri(join(dir, 'a.bin')) });
    expect(meta).toMatchObject({ isDirectory: false, isFile: true, isSymlink: false, size: 7 });
    expect(Object.keys(meta).sort()).toEqual([
      'createdAtMs',
      'isDirectory',
      'isFile',
      'isSymlink',
      'modifiedAtMs',
      'size',
    ]);
    // Codex (musl build) always reports createdAtMs 0; Tether reports the birth time when the kernel has one.
    expect(Number.isInteger(meta.createdAtMs) && (meta.createdAtMs as number) >= 0).toBe(true);
    expect(Math.abs((meta.modifiedAtMs as number) - Date.now())).toBeLessThan(60_000);

    mkdirSync(join(dir, 'sub'));
    symlinkSync('a.bin', join(dir, 'link'));
    symlinkSync('sub', join(dir, 'dirlink'));
    symlinkSync('nowhere', join(dir, 'dangling'));
    execFileSync('mkfifo', [join(dir, 'fifo')]);
    expect(await client.call('fs/getMetadata', { path: fileUri(join(dir, 'link')) })).toMatchObject({
      isFile: true,
      isSymlink: true,
      size: 7,
    });
    expect(await client.call('fs/getMetadata', { path: fileUri(join(dir, 'dirlink')) })).toMatchObject({
      isDirectory: true,
      isSymlink: true,
    });
    expect(await client.call('fs/getMetadata', { path: fileUri(join(dir, 'fifo')) })).toMatchObject({
      isDirectory: false,
      isFile: false,
      isSymlink: false,
    });
    expect(await errorOf(client, 'fs/getMetadata', { path: fileUri(join(dir, 'dangling')) })).toEqual(NOT_FOUND);

    expect(await client.call('fs/canonicalize', { path: fileUri(join(dir, 'sub', '..', 'link')) })).toEqual({
      path: fileUri(join(dir, 'a.bin')),
    });
    expect(await errorOf(client, 'fs/canonicalize', { path: fileUri(join(dir, 'nope')) })).toEqual(NOT_FOUND);

    const listing = await client.call<{ entries: { fileName: string }[] }>('fs/readDirectory', { path: fileUri(dir) });
    // Order is the OS's (Codex) or by name (Tether): compare sorted. Dangling links are left out.
    expect([...listing.entries].sort((a, b) => a.fileName.localeCompare(b.fileName))).toEqual([
      { fileName: 'a.bin', isDirectory: false, isFile: true },
      { fileName: 'dirlink', isDirectory: true, isFile: false },
      { fileName: 'fifo', isDirectory: false, isFile: false },
      { fileName: 'link', isDirectory: false, isFile: true },
      { fileName: 'sp ace é', isDirectory: false, isFile: true },
      { fileName: 'sub', isDirectory: true, isFile: false },
    ]);
    expect(await errorOf(client, 'fs/readDirectory', { path: fileUri(join(dir, 'a.bin')) })).toEqual({
      code: -32603,
      message: 'Not a directory (os error 20)',
    });
  });

  it('missing file, directory where a file is expected, and parameter errors', async () => {
    const dir = scratch();
    const { client } = await h.session(kind, transport);
    expect(await errorOf(client, 'fs/readFile', { path: fileUri(join(dir, 'nope')) })).toEqual(NOT_FOUND);
    expect(await errorOf(client, 'fs/readFile', { path: fileUri(dir) })).toEqual({
      code: -32600,
      message: `path \`${dir}\` is not a file`,
    });
    expect(await errorOf(client, 'fs/writeFile', { path: fileUri(dir), dataBase64: 'aGk=' })).toEqual({
      code: -32603,
      message: 'Is a directory (os error 21)',
    });
    expect(await errorOf(client, 'fs/writeFile', { path: fileUri(join(dir, 'no', 'f')), dataBase64: 'aGk=' })).toEqual(
      NOT_FOUND,
    );
    expect(await errorOf(client, 'fs/readFile', {})).toEqual({ code: -32602, message: 'missing field `path`' });
    expect(await errorOf(client, 'fs/writeFile', { path: fileUri(join(dir, 'f')) })).toEqual({
      code: -32602,
      message: 'missing field `dataBase64`',
    });
    expect(await errorOf(client, 'fs/copy', { sourcePath: fileUri(dir), destinationPath: fileUri(dir) })).toEqual({
      code: -32602,
      message: 'missing field `recursive`',
    });
  });

  it('URIs that are not usable file: URIs', async () => {
    const { client } = await h.session(kind, transport);
    expect(await errorOf(client, 'fs/readFile', { path: '/etc/hostname' })).toEqual({
      code: -32602,
      message: 'invalid URI: relative URL without a base',
    });
    expect(await errorOf(client, 'fs/getMetadata', { path: 'http://example.com/etc/hostname' })).toEqual({
      code: -32602,
      message: 'unsupported path URI scheme `http`',
    });
    expect(await errorOf(client, 'fs/readDirectory', { path: 'file://server/share' })).toEqual({
      code: -32600,
      message: "'file://server/share' is invalid on 'linux'",
    });
    // A relative `file:` URI means the absolute path, as for process/start.
    expect(await client.call('fs/getMetadata', { path: 'file:etc/hostname' })).toMatchObject({ isFile: true });
  });

  it('bad base64 is refused with the base64 crate wording', async () => {
    const dir = scratch();
    const { client } = await h.session(kind, transport);
    const cases: [string, string][] = [
      ['!!notbase64', 'Invalid symbol 33, offset 0.'],
      ['aGk', 'Invalid padding'],
      ['aGk==', 'Invalid symbol 61, offset 3.'],
      ['-_8=', 'Invalid symbol 45, offset 0.'],
      ['a', 'Invalid input length: 1'],
      ['aGF=', 'Invalid last symbol 70, offset 2.'],
      ['aGVsbG8\n', 'Invalid symbol 10, offset 7.'],
    ];
    for (const [text, problem] of cases) {
      expect(await errorOf(client, 'fs/writeFile', { path: fileUri(join(dir, 'b')), dataBase64: text })).toEqual({
        code: -32600,
        message: `fs/writeFile requires valid base64 dataBase64: ${problem}`,
      });
    }
  });

  it('too large: the server limit, and maxBytes (honoured by Tether, ignored by Codex 0.171.0)', async () => {
    const dir = scratch();
    const { client } = await h.session(kind, transport);
    // Sparse: 600 MiB of size, no blocks; both executors refuse from the size alone.
    execFileSync('truncate', ['-s', '600M', join(dir, 'big')]);
    expect(await errorOf(client, 'fs/readFile', { path: fileUri(join(dir, 'big')) })).toEqual({
      code: -32600,
      message: 'file is too large to read: limit is 536870912 bytes',
    });
    writeFileSync(join(dir, 'four'), 'abcd');
    const response = await client.request('fs/readFile', { path: fileUri(join(dir, 'four')), maxBytes: 3 });
    if (kind === 'codex') {
      expect(response.result).toEqual({ dataBase64: b64('abcd') });
    } else {
      expect(response.error).toEqual({ code: -32600, message: 'file is too large to read: limit is 3 bytes' });
      expect(await client.call('fs/readFile', { path: fileUri(join(dir, 'four')), maxBytes: 4 })).toEqual({
        dataBase64: b64('abcd'),
      });
    }
  });

  it('permission denied: unlinking in /proc fails for root too', async () => {
    const { client } = await h.session(kind, transport);
    const error = await errorOf(client, 'fs/remove', { path: 'file:///proc/version', recursive: false });
    // EPERM for root (procfs has no unlink), EACCES for anyone else (/proc is read-only for them):
    // both are Rust's PermissionDenied, which Codex maps to -32600.
    const expected =
      process.getuid?.() === 0 ? 'Operation not permitted (os error 1)' : 'Permission denied (os error 13)';
    expect(error).toEqual({ code: -32600, message: expected });
  });

  it('createDirectory, remove and copy', async () => {
    const dir = scratch();
    const { client } = await h.session(kind, transport);
    const uri = (...parts: string[]) => fileUri(join(dir, ...parts));
    expect(await client.call('fs/createDirectory', { path: uri('x', 'y', 'z') })).toEqual({});
    expect(await client.call('fs/createDirectory', { path: uri('x') })).toEqual({});
    expect(await errorOf(client, 'fs/createDirectory', { path: uri('p', 'q'), recursive: false })).toEqual(NOT_FOUND);
    const exists = { code: -32603, message: 'File exists (os error 17)' };
    expect(await errorOf(client, 'fs/createDirectory', { path: uri('x'), recursive: false })).toEqual(exists);
    writeFileSync(join(dir, 'f'), 'data');
    expect(await errorOf(client, 'fs/createDirectory', { path: uri('f') })).toEqual(exists);
    expect(await errorOf(client, 'fs/createDirectory', { path: uri('f', 'sub') })).toEqual({
      code: -32603,
      message: 'Not a directory (os error 20)',
    });

    writeFileSync(join(dir, 'x', 'y', 'leaf'), 'leaf');
    symlinkSync('y/leaf', join(dir, 'x', 'ln'));
    expect(await client.call('fs/copy', { sourcePath: uri('f'), destinationPath: uri('g'), recursive: false })).toEqual(
      {},
    );
    expect(readFileSync(join(dir, 'g'), 'utf8')).toBe('data');
    expect(
      await errorOf(client, 'fs/copy', { sourcePath: uri('x'), destinationPath: uri('x2'), recursive: false }),
    ).toEqual({
      code: -32600,
      message: 'fs/copy requires recursive: true when sourcePath is a directory',
    });
    expect(await client.call('fs/copy', { sourcePath: uri('x'), destinationPath: uri('x2'), recursive: true })).toEqual(
      {},
    );
    expect(readFileSync(join(dir, 'x2', 'y', 'leaf'), 'utf8')).toBe('leaf');
    // Symlinks are copied as links.
    expect(await client.call('fs/getMetadata', { path: uri('x2', 'ln') })).toMatchObject({
      isSymlink: true,
      isFile: true,
    });
    expect(
      await errorOf(client, 'fs/copy', { sourcePath: uri('x'), destinationPath: uri('x', 'y', 'in'), recursive: true }),
    ).toEqual({
      code: -32600,
      message: 'fs/copy cannot copy a directory to itself or one of its descendants',
    });
    expect(
      await errorOf(client, 'fs/copy', { sourcePath: uri('nope'), destinationPath: uri('n2'), recursive: true }),
    ).toEqual(NOT_FOUND);
    expect(
      await errorOf(client, 'fs/copy', { sourcePath: uri('f'), destinationPath: uri('x'), recursive: false }),
    ).toEqual({
      code: -32603,
      message: 'Is a directory (os error 21)',
    });
    execFileSync('mkfifo', [join(dir, 'fifo')]);
    expect(
      await errorOf(client, 'fs/copy', { sourcePath: uri('fifo'), destinationPath: uri('fifo2'), recursive: false }),
    ).toEqual({
      code: -32600,
      message: 'fs/copy only supports regular files, directories, and symlinks',
    });

    expect(await client.call('fs/remove', { path: uri('nope') })).toEqual({});
    expect(await errorOf(client, 'fs/remove', { path: uri('nope'), force: false })).toEqual(NOT_FOUND);
    expect(await errorOf(client, 'fs/remove', { path: uri('x'), recursive: false })).toEqual({
      code: -32603,
      message: 'Directory not empty (os error 39)',
    });
    expect(await client.call('fs/remove', { path: uri('x2', 'ln'), recursive: false })).toEqual({});
    expect(readFileSync(join(dir, 'x2', 'y', 'leaf'), 'utf8')).toBe('leaf'); // the link, not its target
    expect(await client.call('fs/remove', { path: uri('x') })).toEqual({});
    expect(await errorOf(client, 'fs/getMetadata', { path: uri('x') })).toEqual(NOT_FOUND);
  });

  it('copy of a file onto itself: Codex truncates it, Tether keeps it', async () => {
    const dir = scratch();
    const { client } = await h.session(kind, transport);
    writeFileSync(join(dir, 'self'), 'precious');
    const path = fileUri(join(dir, 'self'));
    expect(await client.call('fs/copy', { sourcePath: path, destinationPath: path, recursive: false })).toEqual({});
    expect(readFileSync(join(dir, 'self'), 'utf8')).toBe(kind === 'codex' ? '' : 'precious');
  });
});
