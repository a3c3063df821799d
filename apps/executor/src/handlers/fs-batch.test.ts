/**
 * Tether's `fileBatch` (`fs/readFiles`, `fs/writeFiles`) and `fileMetadata` (`fs/getMetadata {unix}`,
 * `fs/setMetadata`) through a real ExecServer connection.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MAX_BATCH_FILES, pathToFileUri } from '@tether/exec-protocol';
import { describe, expect, it } from 'vitest';
import { execServers } from '../__tests__/exec-server.js';
import { BATCH_PARALLELISM } from '../fs/batch.js';

const { ready, scratchDir } = execServers();
const box = () => scratchDir('tether-fs-batch-');

const sha = (data: Buffer | string) => createHash('sha256').update(data).digest('hex');
const uri = (path: string) => pathToFileUri(path);

/** Open descriptors of this process (the executor runs in it). */
const openFds = () => readdirSync('/proc/self/fd').length;

describe('fs/readFiles', () => {
  it('is advertised, with fileMetadata', async () => {
    const { capabilities } = await ready();
    expect(capabilities).toMatchObject({ fileBatch: true, fileMetadata: true });
  });

  it('answers each file in order with its bytes, sha256, mode and times; errors, directories and FIFOs in their own entries', async () => {
    const dir = box();
    writeFileSync(join(dir, 'a'), 'alpha', { mode: 0o640 });
    writeFileSync(join(dir, 'empty'), '');
    mkdirSync(join(dir, 'sub'));
    execFileSync('mkfifo', [join(dir, 'fifo')]);
    const { client } = await ready();
    const fdsBefore = openFds();
    const answer = await client.call<{ files: Array<Record<string, unknown>> }>('fs/readFiles', {
      paths: ['a', 'missing', 'empty', 'sub', 'fifo'].map((name) => uri(join(dir, name))),
      maxFileBytes: 1024,
      maxTotalBytes: 4096,
    });
    const info = statSync(join(dir, 'a'), { bigint: true });
    expect(answer.files).toEqual([
      {
        dataBase64: Buffer.from('alpha').toString('base64'),
        sha256: sha('alpha'),
        mode: 0o640,
        modifiedAtMs: Number(info.mtimeNs / 1_000_000n),
        accessedAtMs: expect.any(Number),
      },
      { error: { code: -32004, message: 'No such file or directory (os error 2)' } },
      expect.objectContaining({ dataBase64: '', sha256: sha('') }),
      { error: { code: -32600, message: `path \`${join(dir, 'sub')}\` is not a file` } },
      { error: { code: -32600, message: `path \`${join(dir, 'fifo')}\` is not a file` } },
    ]);
    expect(openFds()).toBe(fdsBefore);
  });

  it('says tooLarge past maxFileBytes and defers, in order, what does not fit in maxTotalBytes', async () => {
    const dir = box();
    const names = Array.from({ length: BATCH_PARALLELISM * 3 }, (_, i) => `f${i}`);
    for (const name of names) writeFileSync(join(dir, name), Buffer.alloc(100, name));
    writeFileSync(join(dir, 'big'), Buffer.alloc(5000));
    const { client } = await ready();
    const answer = await client.call<{ files: Array<Record<string, unknown>> }>('fs/readFiles', {
      paths: ['big', ...names].map((name) => uri(join(dir, name))),
      maxFileBytes: 1000,
      maxTotalBytes: 1050, // ten files and a half
    });
    expect(answer.files[0]).toEqual({ tooLarge: true, size: 5000 });
    const read = answer.files
      .slice(1)
      .map((entry) => ('dataBase64' in entry ? 'read' : 'deferred' in entry ? 'deferred' : '?'));
    expect(read).toEqual(names.map((_, i) => (i < 10 ? 'read' : 'deferred')));
  });

  it('refuses more than MAX_BATCH_FILES paths as invalid params', async () => {
    const { client } = await ready();
    await expect(
      client.call('fs/readFiles', {
        paths: Array.from({ length: MAX_BATCH_FILES + 1 }, () => uri('/x')),
        maxFileBytes: 1,
        maxTotalBytes: 1,
      }),
    ).rejects.toMatchObject({ code: -32602 });
  });

  it('keeps to the configured read limit per file', async () => {
    const dir = box();
    writeFileSync(join(dir, 'f'), '0123456789');
    const { client } = await ready({ config: { maxReadFileBytes: 9 } });
    const answer = await client.call<{ files: unknown[] }>('fs/readFiles', {
      paths: [uri(join(dir, 'f'))],
      maxFileBytes: 100,
      maxTotalBytes: 100,
    });
    expect(answer.files).toEqual([{ tooLarge: true, size: 10 }]);
  });
});

describe('fs/writeFiles', () => {
  it('writes each file whole (creating or truncating) with mode and times, and answers the sha256 of what it wrote', async () => {
    const dir = box();
    writeFileSync(join(dir, 'old'), 'a much longer previous content');
    const { client } = await ready();
    const fdsBefore = openFds();
    const files = [
      { path: uri(join(dir, 'new')), dataBase64: Buffer.from('new bytes').toString('base64') },
      {
        path: uri(join(dir, 'old')),
        dataBase64: Buffer.from('short').toString('base64'),
        mode: 0o600,
        modifiedAtMs: 1_000_000_000_123,
        accessedAtMs: 1_000_000_000_456,
      },
      { path: uri(join(dir, 'no-dir', 'x')), dataBase64: '' },
      { path: uri(join(dir, 'empty')), dataBase64: '' },
    ];
    const answer = await client.call<{ files: unknown[] }>('fs/writeFiles', { files });
    expect(answer.files).toEqual([
      { sha256: sha('new bytes'), bytes: 9 },
      { sha256: sha('short'), bytes: 5 },
      { error: { code: -32004, message: 'No such file or directory (os error 2)' } },
      { sha256: sha(''), bytes: 0 },
    ]);
    const info = statSync(join(dir, 'old'), { bigint: true }); // before reading it moves the access time
    expect(readFileSync(join(dir, 'new'), 'utf8')).toBe('new bytes');
    expect(readFileSync(join(dir, 'old'), 'utf8')).toBe('short');
    expect(Number(info.mode) & 0o7777).toBe(0o600);
    // To the millisecond (Node 22+ keeps the double's nanoseconds: a few hundred past the millisecond).
    expect(info.mtimeNs / 1_000_000n).toBe(1_000_000_000_123n);
    expect(info.atimeNs / 1_000_000n).toBe(1_000_000_000_456n);
    expect(readFileSync(join(dir, 'empty'), 'utf8')).toBe('');
    expect(openFds()).toBe(fdsBefore);
  });

  it('writes a path named twice one after the other, so the last entry is the whole file', async () => {
    const dir = box();
    const target = uri(join(dir, 'twice'));
    const long = Buffer.alloc(1024 * 1024, 'L');
    const { client } = await ready();
    // Several copies, so entries of the same path would run at once if the request were written in parallel.
    const files = [long, Buffer.from('short'), long, Buffer.from('last')].map((data) => ({
      path: target,
      dataBase64: data.toString('base64'),
    }));
    const answer = await client.call<{ files: unknown[] }>('fs/writeFiles', { files });
    expect(answer.files).toHaveLength(4);
    expect(readFileSync(join(dir, 'twice'), 'utf8')).toBe('last');
  });

  it('refuses a FIFO without blocking, bad base64, a mode out of range and one time without the other', async () => {
    const dir = box();
    execFileSync('mkfifo', [join(dir, 'fifo')]);
    const { client } = await ready();
    const answer = await client.call<{ files: unknown[] }>('fs/writeFiles', {
      files: [
        { path: uri(join(dir, 'fifo')), dataBase64: 'eA==' },
        { path: uri(join(dir, 'half')), dataBase64: 'eA==', modifiedAtMs: 5 },
      ],
    });
    expect(answer.files).toEqual([
      { error: { code: -32600, message: expect.stringContaining('is not a file') } },
      { error: { code: -32602, message: 'modifiedAtMs and accessedAtMs are set together: give both or neither' } },
    ]);
    await expect(
      client.call('fs/writeFiles', { files: [{ path: uri(join(dir, 'b')), dataBase64: '!!' }] }),
    ).rejects.toMatchObject({ code: -32602 });
    await expect(
      client.call('fs/writeFiles', { files: [{ path: uri(join(dir, 'b')), dataBase64: '', mode: 0o10000 }] }),
    ).rejects.toMatchObject({ code: -32602 });
  });
});

describe('fileMetadata', () => {
  it('fs/getMetadata adds mode and accessedAtMs only when asked; fs/setMetadata sets them', async () => {
    const dir = box();
    const file = join(dir, 'f');
    writeFileSync(file, 'x', { mode: 0o644 });
    const { client } = await ready();
    const plain = await client.call<Record<string, unknown>>('fs/getMetadata', { path: uri(file) });
    expect(Object.keys(plain).sort()).toEqual([
      'createdAtMs',
      'isDirectory',
      'isFile',
      'isSymlink',
      'modifiedAtMs',
      'size',
    ]);
    await client.call('fs/setMetadata', {
      path: uri(file),
      mode: 0o751,
      modifiedAtMs: 1_500_000_000_789,
      accessedAtMs: 1_400_000_000_000,
    });
    const unix = await client.call<Record<string, unknown>>('fs/getMetadata', { path: uri(file), unix: true });
    expect(unix).toMatchObject({ mode: 0o751, modifiedAtMs: 1_500_000_000_789, accessedAtMs: 1_400_000_000_000 });
    await client.call('fs/setMetadata', { path: uri(dir), mode: 0o700 });
    expect(statSync(dir).mode & 0o7777).toBe(0o700);
    await expect(client.call('fs/setMetadata', { path: uri(join(dir, 'none')), mode: 0o600 })).rejects.toMatchObject({
      code: -32004,
    });
  });
});
