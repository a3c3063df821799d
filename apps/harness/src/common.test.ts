import { closeSync, createWriteStream, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Writable } from 'node:stream';
import type { ProcessEvent } from '@tether/client';
import { afterEach, describe, expect, it } from 'vitest';
import type { CliIo } from './common.js';
import { formatBytes, printOutput, watchOutput, writeOutput } from './common.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** Output events with a release each, as the client hands pooled raw output on; and what was released when. */
function outputs(texts: string[]) {
  const log: string[] = [];
  const events: ProcessEvent[] = texts.map((text, i) => ({
    kind: 'output',
    processId: 'p',
    seq: i + 1,
    stream: 'stdout',
    chunk: Buffer.from(text),
    release: () => log.push(`released ${text}`),
  }));
  const iterable = {
    completion: Promise.resolve({ exitCode: 0 }),
    async *[Symbol.asyncIterator]() {
      yield* events;
    },
  };
  return { iterable, log };
}

describe('printOutput', () => {
  it('gives a pooled chunk back once stdout on a file descriptor has written it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'harness-output-'));
    dirs.push(dir);
    const file = join(dir, 'out');
    const fd = openSync(file, 'w');
    // A stream on the descriptor, as process.stdout is for `> file`.
    const stdout = createWriteStream('', { fd, autoClose: false });
    const io = { stdout, stderr: new PassThrough(), stdin: new PassThrough(), env: {} } as unknown as CliIo;
    const { iterable, log } = outputs(['one ', 'two']);
    expect(await printOutput(io, iterable)).toBe(0);
    await new Promise((resolve) => stdout.end(resolve));
    closeSync(fd);
    expect(readFileSync(file, 'utf8')).toBe('one two');
    expect(log).toEqual(['released one ', 'released two']);
  });

  it('keeps a chunk out of the pool when stdout is a stream that may still hold it (no descriptor)', async () => {
    const stdout = new PassThrough();
    const io = { stdout, stderr: new PassThrough(), stdin: new PassThrough(), env: {} } as unknown as CliIo;
    const { iterable, log } = outputs(['one ', 'two']);
    expect(await printOutput(io, iterable)).toBe(0);
    expect(stdout.read().toString()).toBe('one two');
    expect(log).toEqual([]);
  });
});

describe('writeOutput', () => {
  it('lets a MiB wait for a slow reader before it waits for the drain', async () => {
    const done: Array<() => void> = [];
    const stdout = new Writable({
      highWaterMark: 16 * 1024,
      write(_chunk, _encoding, callback) {
        done.push(callback);
      },
    });
    const io = { stdout, stderr: new PassThrough(), stdin: new PassThrough(), env: {} } as unknown as CliIo;
    watchOutput(io);
    const chunk = Buffer.alloc(64 * 1024);
    let returned = 0;
    for (let i = 0; i < 16; i++) {
      await writeOutput(io, stdout, chunk);
      returned++;
    }
    expect(returned).toBe(16);
    let waited = false;
    const seventeenth = writeOutput(io, stdout, chunk).then(() => {
      waited = true;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(waited).toBe(false);
    while (done.length > 0) {
      done.shift()!();
      await new Promise((resolve) => setImmediate(resolve));
    }
    await seventeenth;
    expect(waited).toBe(true);
  });
});

describe('formatBytes', () => {
  it('prints whole bytes below a KiB, a rate included, and one decimal above', () => {
    expect(formatBytes(13)).toBe('13 B');
    expect(formatBytes(13 / 0.045)).toBe('289 B');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(3 * 1024 ** 3)).toBe('3.0 GiB');
  });
});
