import { lstatSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { finished } from 'node:stream/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { decodeAnswer } from './edge.js';
import type { FsCaller } from './remote-fs.js';
import { RemoteFs } from './remote-fs-node.js';

const work = mkdtempSync(join(tmpdir(), 'tether-client-hostile-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/**
 * A stand-in executor connection that answers every call with `answer(method, params)`, decoded at the edge as
 * ExecServerClient.call decodes what a real executor answers.
 */
function hostile(answer: (method: string, params: Record<string, unknown>) => unknown): FsCaller {
  return {
    capabilities: () => new Set(),
    call: async (method, params) => decodeAnswer(method, answer(method, (params ?? {}) as Record<string, unknown>)),
  };
}

describe('RemoteFs treats what an executor answers as untrusted', () => {
  it('refuses a listing with an entry name that is not one path component, naming the entry', async () => {
    for (const [name, why] of [
      ['../../x', 'contains "/"'],
      ['a/b', 'contains "/"'],
      ['..', 'is ".."'],
      ['.', 'is "."'],
      ['', 'is empty'],
      ['x\u0000y', 'contains a NUL byte'],
    ] as const) {
      const fs = new RemoteFs(
        hostile(() => ({
          entries: [
            { fileName: 'fine', isDirectory: false, isFile: true },
            { fileName: name, isDirectory: false, isFile: true },
          ],
        })),
      );
      const error = await fs.readDirectory('/tree').catch((err: unknown) => err);
      expect(error).toMatchObject({ name: 'TetherError', code: 'protocol' });
      expect((error as Error).message).toBe(
        `the executor's listing of /tree is unusable: entry name ${JSON.stringify(name)} ${why} (an entry must be one path component)`,
      );
    }
  });

  it('refuses a listing that is not an array of entries with boolean kinds', async () => {
    for (const answer of [
      {},
      { entries: 'x' },
      { entries: [{ fileName: 7 }] },
      { entries: [{ fileName: 'a', isFile: 'yes', isDirectory: false }] },
      null,
    ]) {
      await expect(new RemoteFs(hostile(() => answer)).readDirectory('/d')).rejects.toMatchObject({ code: 'protocol' });
    }
  });

  it('keeps names a POSIX directory may hold: a backslash, spaces, a leading dot, unicode', async () => {
    const names = ['a\\b', 'with space', '.hidden', '..dots', 'ünï'];
    const fs = new RemoteFs(
      hostile(() => ({ entries: names.map((fileName) => ({ fileName, isDirectory: false, isFile: true })) })),
    );
    expect((await fs.readDirectory('/d')).map((entry) => entry.fileName)).toEqual(names);
  });

  it('refuses a read block longer than the one asked for', async () => {
    const fs = new RemoteFs(
      hostile((method, params) =>
        method === 'fs/readBlock'
          ? { chunk: Buffer.alloc((params.len as number) + 1, 1).toString('base64'), eof: true }
          : method === 'fs/open'
            ? { handleId: params.handleId }
            : {},
      ),
    );
    const stream = fs.createReadStream('/f', { blockSize: 16 });
    stream.resume();
    await expect(finished(stream)).rejects.toThrow('fs/readBlock answered 17 bytes for a block of 16 in /f');
  });

  it('refuses a whole-file read over the caller\u2019s maxBytes, whatever the executor sends', async () => {
    const fs = new RemoteFs(hostile(() => ({ dataBase64: Buffer.alloc(100).toString('base64') })));
    await expect(fs.readFile('/f', { maxBytes: 10 })).rejects.toThrow(
      'the executor answered 100 bytes of /f, more than the limit of 10',
    );
    await expect(new RemoteFs(hostile(() => ({}))).readFile('/f')).rejects.toMatchObject({ code: 'protocol' });
  });
});

describe('LocalFs write streams with noFollow', () => {
  it('refuse to write through a symbolic link at the path and leave its target alone', async () => {
    const { LocalFs } = await import('./local-fs.js');
    const outside = join(work, 'outside.txt');
    writeFileSync(outside, 'untouched');
    const link = join(work, 'planted');
    symlinkSync(outside, link);
    const sink = new LocalFs().createWriteStream(link, { noFollow: true });
    sink.end('overwritten');
    await expect(finished(sink)).rejects.toMatchObject({ code: 'ELOOP' });
    expect(readFileSync(outside, 'utf8')).toBe('untouched');
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    // Without it (the default, for a destination the user named) the link is followed, as cp does.
    const following = new LocalFs().createWriteStream(link);
    following.end('followed');
    await finished(following);
    expect(readFileSync(outside, 'utf8')).toBe('followed');
  });
});
