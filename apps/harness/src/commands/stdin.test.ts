import { createHash, randomBytes } from 'node:crypto';
import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import type { WriteStatus } from '@tether/client';
import { describe, expect, it } from 'vitest';
import type { CliIo } from '../common.js';
import { FileStdin, forwardInput, STDIN_UNANSWERED_BYTES, STDIN_WRITE_BYTES } from './stdin.js';

/** A stdin stand-in and a target whose writes are answered when the test says. */
function setup(isTTY = true) {
  const stdin = new PassThrough();
  const rawModes: boolean[] = [];
  const io = {
    stdin: Object.assign(stdin, { isTTY, setRawMode: (raw: boolean) => rawModes.push(raw) }),
    stdout: new PassThrough(),
    stderr: new PassThrough(),
    env: {},
  } as unknown as CliIo;
  const answers: Array<(status: WriteStatus) => void> = [];
  const written: Buffer[] = [];
  let closed = 0;
  const target = {
    processId: 'p1',
    write: (chunk: Buffer) =>
      new Promise<WriteStatus>((resolve) => {
        written.push(chunk);
        answers.push(resolve);
      }),
    closeStdin: async () => {
      closed++;
      return 'accepted' as WriteStatus;
    },
  };
  return { stdin, io, target, answers, written, rawModes, closed: () => closed };
}

const turn = () => new Promise((resolve) => setImmediate(resolve));

describe('forwardInput', () => {
  it('after the cleanup, a write answered late does not start reading stdin again (it would keep the harness alive)', async () => {
    const { stdin, io, target, answers, rawModes } = setup();
    const cleanup = forwardInput(target, io, { closeAtEnd: true, rawMode: true });
    stdin.write(Buffer.from('\x04'));
    await turn();
    expect(answers).toHaveLength(1);
    // The process ended and the command cleans up before the executor answered the Ctrl-D.
    cleanup();
    expect(stdin.isPaused()).toBe(true);
    answers[0]!('accepted');
    await turn();
    expect(stdin.isPaused()).toBe(true);
    expect(rawModes).toEqual([false]);
  });

  it('pauses stdin while a MiB is unanswered and reads again once answers come', async () => {
    const { stdin, io, target, answers } = setup();
    const cleanup = forwardInput(target, io, { closeAtEnd: false, rawMode: false });
    stdin.write(Buffer.alloc(STDIN_UNANSWERED_BYTES));
    await turn();
    expect(stdin.isPaused()).toBe(true);
    answers[0]!('accepted');
    await turn();
    expect(stdin.isPaused()).toBe(false);
    cleanup();
  });

  it('sends keystrokes at once, each its own write, while others are unanswered', async () => {
    const { stdin, io, target, written } = setup(true);
    const cleanup = forwardInput(target, io, { closeAtEnd: false, rawMode: true });
    for (const key of ['l', 's', '\r']) {
      stdin.write(Buffer.from(key));
      await turn();
    }
    expect(written.map(String)).toEqual(['l', 's', '\r']);
    cleanup();
  });

  it('coalesces piped input: the first piece at once, the next ones held until an answer or the write size', async () => {
    const { stdin, io, target, answers, written } = setup(false);
    forwardInput(target, io, { closeAtEnd: true, rawMode: false });
    stdin.write(Buffer.from('a'));
    await turn();
    stdin.write(Buffer.from('b'));
    await turn();
    stdin.write(Buffer.from('c'));
    await turn();
    // 'b' and 'c' wait for the answer to 'a', then go as one write.
    expect(written.map(String)).toEqual(['a']);
    answers[0]!('accepted');
    await turn();
    expect(written.map(String)).toEqual(['a', 'bc']);
    // With a write unanswered, held pieces go as soon as they make the write size, in order.
    const piece = Buffer.alloc(STDIN_WRITE_BYTES / 4, 1);
    for (let i = 0; i < 5; i++) {
      stdin.write(piece);
      await turn();
    }
    expect(written.map((w) => w.length)).toEqual([1, 2, STDIN_WRITE_BYTES]);
    // The end sends what is still held; the close follows the last answer.
    stdin.end(Buffer.from('z'));
    await turn();
    expect(written.map((w) => w.length)).toEqual([1, 2, STDIN_WRITE_BYTES, STDIN_WRITE_BYTES / 4 + 1]);
    for (const answer of answers.slice(1)) answer('accepted');
    await turn();
    await turn();
    expect(Buffer.concat(written).toString('latin1')).toBe(
      `abc${Buffer.alloc(STDIN_WRITE_BYTES + STDIN_WRITE_BYTES / 4, 1).toString('latin1')}z`,
    );
  });

  it('counts held input against the window: piped stdin pauses while a MiB is unanswered or held', async () => {
    const { stdin, io, target, answers } = setup(false);
    const cleanup = forwardInput(target, io, { closeAtEnd: false, rawMode: false });
    const piece = Buffer.alloc(STDIN_WRITE_BYTES - 1);
    let pieces = 0;
    while (!stdin.isPaused() && pieces < 20) {
      stdin.write(piece);
      pieces++;
      await turn();
    }
    expect(stdin.isPaused()).toBe(true);
    expect(pieces * piece.length).toBeGreaterThanOrEqual(STDIN_UNANSWERED_BYTES);
    expect((pieces - 1) * piece.length).toBeLessThan(STDIN_UNANSWERED_BYTES);
    for (const answer of answers) answer('accepted');
    await turn();
    expect(stdin.isPaused()).toBe(false);
    cleanup();
  });

  it('closes the process stdin at the end, after the last write is answered; the detach keys stop the input', async () => {
    const piped = setup();
    forwardInput(piped.target, piped.io, { closeAtEnd: true, rawMode: false });
    piped.stdin.end(Buffer.from('last'));
    await turn();
    expect(piped.closed()).toBe(0);
    piped.answers[0]!('accepted');
    await turn();
    expect(piped.closed()).toBe(1);

    const keyed = setup();
    let detached = 0;
    forwardInput(keyed.target, keyed.io, {
      closeAtEnd: false,
      rawMode: true,
      keys: {
        watcher: { feed: (chunk) => ({ forward: chunk.subarray(0, 1), detach: chunk.length > 1 }) },
        onDetachKeys: () => detached++,
      },
    });
    keyed.stdin.write(Buffer.from('ab'));
    keyed.stdin.write(Buffer.from('c'));
    await turn();
    expect(Buffer.concat(keyed.written).toString()).toBe('a');
    expect(detached).toBe(1);
  });
});

describe('FileStdin', () => {
  it('forwards a file byte for byte in reused buffers: no more than the window holds, none reused while unanswered', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'harness-file-stdin-'));
    const file = join(dir, 'input');
    const content = randomBytes(20 * STDIN_WRITE_BYTES + 12_345);
    writeFileSync(file, content);
    const fd = openSync(file, 'r');
    try {
      const stdin = new FileStdin(fd);
      const io = { stdin, stdout: new PassThrough(), stderr: new PassThrough(), env: {} } as unknown as CliIo;
      const hash = createHash('sha256');
      const memories = new Set<ArrayBufferLike>();
      let closed = false;
      const target = {
        processId: 'p1',
        // Answered a little later, as over a network; the bytes must be what was read until then.
        write: (chunk: Buffer) => {
          memories.add(chunk.buffer);
          const copy = Buffer.from(chunk);
          return new Promise<WriteStatus>((resolve) =>
            setTimeout(() => {
              expect(chunk.equals(copy)).toBe(true);
              hash.update(copy);
              resolve('accepted');
            }, 2),
          );
        },
        closeStdin: async () => {
          closed = true;
          return 'accepted' as WriteStatus;
        },
      };
      forwardInput(target, io, { closeAtEnd: true, rawMode: false });
      while (!closed) await new Promise((resolve) => setTimeout(resolve, 5));
      expect(hash.digest('hex')).toBe(createHash('sha256').update(content).digest('hex'));
      expect(memories.size).toBeLessThanOrEqual(STDIN_UNANSWERED_BYTES / STDIN_WRITE_BYTES + 2);
    } finally {
      closeSync(fd);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
