/**
 * The SDK's many-small-files calls (`readFiles`, `writeFiles`) and metadata calls (`getUnixMetadata`,
 * `setMetadata`): LocalFs against this machine's files, RemoteFs against an executor without the capability.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LocalFs } from './local-fs.js';
import { RemoteFs } from './remote-fs.js';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'tether-fs-batch-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('LocalFs.readFiles', () => {
  it('reads in order within the limits: tooLarge past the file limit, deferred from the first that does not fit', async () => {
    const names = Array.from({ length: 20 }, (_, i) => `f${i}`);
    for (const name of names) writeFileSync(join(dir, name), Buffer.alloc(100, name));
    writeFileSync(join(dir, 'big'), Buffer.alloc(2000));
    const fs = new LocalFs();
    const reads = await fs.readFiles(
      ['big', 'missing', ...names].map((name) => join(dir, name)),
      { maxFileBytes: 1000, maxTotalBytes: 1050 },
    );
    expect(reads[0]).toEqual({ kind: 'tooLarge', size: 2000 });
    expect(reads[1]).toMatchObject({ kind: 'error', error: { code: 'not_found' } });
    expect(reads.slice(2).map((read) => read.kind)).toEqual(names.map((_, i) => (i < 10 ? 'data' : 'deferred')));
    expect(reads[2]).toMatchObject({ kind: 'data', data: Buffer.alloc(100, 'f0'), sha256: null });
  });

  it('never defers the first file, even past maxTotalBytes', async () => {
    writeFileSync(join(dir, 'a'), Buffer.alloc(500));
    const reads = await new LocalFs().readFiles([join(dir, 'a')], { maxFileBytes: 1000, maxTotalBytes: 10 });
    expect(reads[0]?.kind).toBe('data');
  });

  it('refuses a FIFO without waiting for a writer', async () => {
    execFileSync('mkfifo', [join(dir, 'fifo')]);
    const reads = await new LocalFs().readFiles([join(dir, 'fifo')], { maxFileBytes: 10, maxTotalBytes: 10 });
    expect(reads[0]).toMatchObject({ kind: 'error', error: { message: `${join(dir, 'fifo')} is not a regular file` } });
  });
});

describe('LocalFs.writeFiles and metadata', () => {
  it('writes files whole (truncating), sets mode and times to the millisecond, and refuses a link with noFollow', async () => {
    writeFileSync(join(dir, 'old'), 'a longer previous content');
    writeFileSync(join(dir, 'target'), 'untouched');
    symlinkSync(join(dir, 'target'), join(dir, 'link'));
    const fs = new LocalFs();
    const metadata = { mode: 0o604, modifiedAtMs: 1_234_567_890_123, accessedAtMs: 1_234_567_890_456 };
    const written = await fs.writeFiles([
      { path: join(dir, 'old'), data: Buffer.from('short'), metadata },
      { path: join(dir, 'link'), data: Buffer.from('pwned'), noFollow: true },
    ]);
    expect(written[0]).toEqual({ sha256: null });
    expect(written[1]).toMatchObject({ error: { cause: { code: 'ELOOP' } } });
    const info = statSync(join(dir, 'old'), { bigint: true });
    expect(Number(info.mode) & 0o7777).toBe(0o604);
    // To the millisecond: libuv on Node 20 keeps microseconds of the double it is given, Node 22+ nanoseconds
    // (so a few hundred ns past the millisecond, from the half microsecond added against truncation).
    expect(info.mtimeNs / 1_000_000n).toBe(1_234_567_890_123n);
    expect(info.atimeNs / 1_000_000n).toBe(1_234_567_890_456n);
    expect(await fs.getUnixMetadata(join(dir, 'old'))).toEqual(metadata); // before a read moves its atime
    expect(readFileSync(join(dir, 'old'), 'utf8')).toBe('short');
    expect(readFileSync(join(dir, 'target'), 'utf8')).toBe('untouched');

    await fs.setMetadata(dir, { mode: 0o711, modifiedAtMs: 1_000, accessedAtMs: 2_000 });
    expect(await fs.getUnixMetadata(dir)).toEqual({ mode: 0o711, modifiedAtMs: 1_000, accessedAtMs: 2_000 });
    await expect(fs.setMetadata(join(dir, 'link'), metadata, { noFollow: true })).rejects.toThrow(join(dir, 'link'));
    expect(statSync(join(dir, 'target')).mode & 0o7777).not.toBe(0o604);
  });
});

describe('RemoteFs without fileBatch or fileMetadata (Codex)', () => {
  const fs = new RemoteFs({
    capabilities: () => new Set(['fileWriteStreaming']),
    call: async () => {
      throw new Error('no call may be made');
    },
  });

  it('says so instead of calling a method Codex does not have', async () => {
    expect(fs.batching).toBe(false);
    expect(fs.unixMetadata).toBe(false);
    await expect(fs.readFiles(['/x'], { maxFileBytes: 1, maxTotalBytes: 1 })).rejects.toThrow(
      'this executor does not offer fileBatch',
    );
    await expect(fs.writeFiles([{ path: '/x', data: Buffer.alloc(0) }])).rejects.toThrow(
      'this executor does not offer fileBatch',
    );
    await expect(fs.getUnixMetadata('/x')).rejects.toThrow('this executor does not offer fileMetadata');
    await expect(fs.setMetadata('/x', { mode: 0, modifiedAtMs: 0, accessedAtMs: 0 })).rejects.toThrow(
      'this executor does not offer fileMetadata',
    );
  });
});
