import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { InPlaceFileWriter } from './file-writer.js';

const work = mkdtempSync(join(tmpdir(), 'tether-file-writer-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const writeOne = (stream: InPlaceFileWriter, chunk: Buffer) =>
  new Promise<void>((resolve, reject) => stream.write(chunk, (err) => (err ? reject(err) : resolve())));

describe('InPlaceFileWriter', () => {
  it('creates a file with the default mode', async () => {
    const path = join(work, 'new');
    await pipeline(Readable.from([Buffer.from('hello '), Buffer.from('world')]), new InPlaceFileWriter(path));
    expect(readFileSync(path, 'utf8')).toBe('hello world');
    expect(statSync(path).mode & 0o777).toBe(0o666 & ~process.umask());
  });

  it('extends a shorter file and cuts a longer one, keeping the same file', async () => {
    const path = join(work, 'existing');
    writeFileSync(path, 'abc');
    const inode = statSync(path).ino;
    await pipeline(Readable.from([Buffer.from('0123456789')]), new InPlaceFileWriter(path));
    expect(readFileSync(path, 'utf8')).toBe('0123456789');
    const stream = new InPlaceFileWriter(path);
    await writeOne(stream, Buffer.from('xy'));
    expect(readFileSync(path, 'utf8')).toBe('xy23456789'); // not truncated while it writes
    await new Promise<void>((resolve) => stream.end(resolve));
    await new Promise((resolve) => stream.once('close', resolve));
    expect(readFileSync(path, 'utf8')).toBe('xy');
    expect(statSync(path).ino).toBe(inode);
  });

  it('destroyed, it cuts the file where its writes ended and closes the descriptor', async () => {
    const path = join(work, 'destroyed');
    writeFileSync(path, 'x'.repeat(64));
    const stream = new InPlaceFileWriter(path);
    await writeOne(stream, Buffer.from('part'));
    const pending = Buffer.alloc(1024 * 1024, 0x61);
    stream.write(pending, () => undefined); // still in flight when destroyed: it lands before the cut
    stream.destroy(new Error('stop'));
    const error = await new Promise((resolve) => stream.once('error', resolve));
    expect(error).toMatchObject({ message: 'stop' });
    await new Promise((resolve) => (stream.closed ? resolve(null) : stream.once('close', resolve)));
    expect(readFileSync(path).equals(Buffer.concat([Buffer.from('part'), pending]))).toBe(true);
  });

  it('writes to a character device without seeking or cutting it', async () => {
    await pipeline(Readable.from([Buffer.from('discarded')]), new InPlaceFileWriter('/dev/null'));
  });

  it('fails with the OS error when the file cannot be opened', async () => {
    await expect(
      pipeline(Readable.from([Buffer.from('x')]), new InPlaceFileWriter(join(work, 'missing', 'f'))),
    ).rejects.toMatchObject({ code: 'ENOENT' });
    await expect(pipeline(Readable.from([Buffer.from('x')]), new InPlaceFileWriter(work))).rejects.toMatchObject({
      code: 'EISDIR',
    });
  });
});
