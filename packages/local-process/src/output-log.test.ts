import { afterEach, describe, expect, it, vi } from 'vitest';
import { OutputLog } from './output-log.js';
import type { ProcessEvent } from './types.js';

function pipeLog(options: { maxBytes?: number; maxChunks?: number; events?: ProcessEvent[] } = {}): OutputLog {
  const events = options.events;
  return new OutputLog({
    processId: 'p',
    streams: ['stdout', 'stderr'],
    maxBytes: options.maxBytes,
    maxChunks: options.maxChunks,
    onEvent: events ? (event) => events.push(event) : undefined,
  });
}

const text = (n: number) => Buffer.from('x'.repeat(n));
const seqs = (result: { chunks: { seq: number }[] }) => result.chunks.map((chunk) => chunk.seq);

afterEach(() => {
  vi.useRealTimers();
});

describe('seq assignment', () => {
  it('shares one counter between output, exit and close; close is last and emitted in order', () => {
    const events: ProcessEvent[] = [];
    const log = pipeLog({ events });
    log.append('stdout', Buffer.from('out'));
    log.append('stderr', Buffer.from('err'));
    log.exit(7);
    log.endStream('stdout');
    log.endStream('stderr');
    expect(events.map((event) => [event.kind, event.seq])).toEqual([
      ['output', 1],
      ['output', 2],
      ['exited', 3],
      ['closed', 4],
    ]);
    expect(log.nextSeq).toBe(5);
    expect(log.closed).toBe(true);
  });

  it('keeps numbering output after the exit and closes only when every stream has ended', () => {
    const events: ProcessEvent[] = [];
    const log = pipeLog({ events });
    log.endStream('stderr');
    log.exit(0);
    expect(log.closed).toBe(false);
    log.append('stdout', Buffer.from('late'));
    log.endStream('stdout');
    expect(events.map((event) => [event.kind, event.seq])).toEqual([
      ['exited', 1],
      ['output', 2],
      ['closed', 3],
    ]);
  });

  it('does not close before the exit is known, and ignores a second exit or stream end', () => {
    const events: ProcessEvent[] = [];
    const log = pipeLog({ events });
    log.endStream('stdout');
    log.endStream('stdout');
    log.endStream('stderr');
    expect(log.closed).toBe(false);
    log.exit(3);
    log.exit(4);
    expect(log.exitCode).toBe(3);
    expect(events.map((event) => event.kind)).toEqual(['exited', 'closed']);
  });

  it('a throwing listener does not break the log', async () => {
    const log = new OutputLog({
      processId: 'p',
      streams: ['pty'],
      onEvent: () => {
        throw new Error('listener bug');
      },
    });
    const uncaught = new Promise<unknown>((resolve) => {
      const listeners = process.listeners('uncaughtException');
      process.removeAllListeners('uncaughtException');
      process.once('uncaughtException', (err) => {
        for (const listener of listeners) process.on('uncaughtException', listener);
        resolve(err);
      });
    });
    log.append('pty', Buffer.from('a'));
    expect(((await uncaught) as Error).message).toBe('listener bug');
    expect(log.nextSeq).toBe(2);
  });
});

describe('retention', () => {
  it('drops the oldest chunks beyond the byte budget', async () => {
    const log = pipeLog({ maxBytes: 10 });
    log.append('stdout', text(4));
    log.append('stdout', text(4));
    log.append('stdout', text(4));
    expect(log.retainedBytes).toBe(8);
    expect(seqs(await log.read())).toEqual([2, 3]);
  });

  it('drops the oldest chunks beyond the chunk budget', async () => {
    const log = pipeLog({ maxChunks: 2 });
    for (let i = 0; i < 5; i++) log.append('stdout', text(1));
    expect(log.retainedChunks).toBe(2);
    expect(seqs(await log.read())).toEqual([4, 5]);
  });

  it('keeps the budget strict even for a single oversized chunk', async () => {
    const log = pipeLog({ maxBytes: 3 });
    log.append('stdout', text(2));
    log.append('stdout', text(5));
    expect(log.retainedChunks).toBe(0);
    log.append('stdout', text(1));
    expect(seqs(await log.read())).toEqual([3]);
  });

  it('stays correct across many drops (compaction of the ring)', async () => {
    const log = pipeLog({ maxChunks: 3 });
    for (let i = 0; i < 5_000; i++) log.append(i % 2 ? 'stderr' : 'stdout', Buffer.from(String(i)));
    const result = await log.read({ afterSeq: 4_997 });
    expect(seqs(result)).toEqual([4_998, 4_999, 5_000]);
    expect(result.chunks.map((chunk) => chunk.chunk.toString())).toEqual(['4997', '4998', '4999']);
    expect(seqs(await log.read({ afterSeq: 4_998 }))).toEqual([4_999, 5_000]);
  });
});

describe('read', () => {
  it('returns chunks after afterSeq (default 0) and the current nextSeq when maxBytes is omitted', async () => {
    const log = pipeLog();
    log.append('stdout', Buffer.from('a'));
    log.append('stderr', Buffer.from('b'));
    log.exit(0);
    const all = await log.read();
    expect(seqs(all)).toEqual([1, 2]);
    expect(all).toMatchObject({ nextSeq: 4, exited: true, exitCode: 0, closed: false });
    expect(seqs(await log.read({ afterSeq: 1 }))).toEqual([2]);
  });

  it('pages by maxBytes: first chunk always, stop before exceeding, stop at or past the limit', async () => {
    const log = pipeLog();
    log.append('stdout', text(5)); // seq 1
    log.append('stdout', text(3)); // seq 2
    log.append('stdout', text(2)); // seq 3
    log.append('stdout', text(4)); // seq 4
    log.exit(0); // seq 5

    const oversized = await log.read({ maxBytes: 2 });
    expect(seqs(oversized)).toEqual([1]);
    expect(oversized.nextSeq).toBe(2);

    const exact = await log.read({ maxBytes: 8 });
    expect(seqs(exact)).toEqual([1, 2]);
    expect(exact.nextSeq).toBe(3);

    const wouldExceed = await log.read({ afterSeq: 1, maxBytes: 7 });
    expect(seqs(wouldExceed)).toEqual([2, 3]);
    expect(wouldExceed.nextSeq).toBe(4);

    // With maxBytes and every chunk returned, nextSeq does not cover the exit event.
    const rest = await log.read({ afterSeq: 3, maxBytes: 100 });
    expect(seqs(rest)).toEqual([4]);
    expect(rest.nextSeq).toBe(5);

    // No chunk left: the current nextSeq.
    const empty = await log.read({ afterSeq: 5, maxBytes: 100 });
    expect(empty).toMatchObject({ chunks: [], nextSeq: 6, exited: true });
  });

  it('rejects negative or fractional numbers', () => {
    const log = pipeLog();
    expect(() => log.read({ afterSeq: -1 })).toThrow(/afterSeq must be a non-negative integer/);
    expect(() => log.read({ maxBytes: 1.5 })).toThrow(/maxBytes/);
    expect(() => log.read({ waitMs: -5 })).toThrow(/waitMs/);
  });

  it('returns at once when an exit after afterSeq is unseen, and waits when it was seen', async () => {
    vi.useFakeTimers();
    const log = pipeLog();
    log.exit(0); // seq 1
    expect(await log.read({ waitMs: 1_000 })).toMatchObject({ nextSeq: 2, exited: true, closed: false });

    let settled = false;
    const pending = log.read({ afterSeq: 1, waitMs: 1_000 }).then((result) => {
      settled = true;
      return result;
    });
    await vi.advanceTimersByTimeAsync(500);
    expect(settled).toBe(false);
    log.endStream('stdout');
    log.endStream('stderr');
    const result = await pending;
    expect(result).toMatchObject({ chunks: [], nextSeq: 3, closed: true });
    expect(vi.getTimerCount()).toBe(0);
  });

  it('long-polls until output arrives and clears its timer', async () => {
    vi.useFakeTimers();
    const log = pipeLog();
    const pending = log.read({ waitMs: 10_000 });
    expect(vi.getTimerCount()).toBe(1);
    log.append('stderr', Buffer.from('hi'));
    const result = await pending;
    expect(seqs(result)).toEqual([1]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('wakes every waiter, each by its own afterSeq', async () => {
    vi.useFakeTimers();
    const log = pipeLog();
    log.append('stdout', Buffer.from('a'));
    const early = log.read({ afterSeq: 1, waitMs: 10_000 });
    const later = log.read({ afterSeq: 2, waitMs: 10_000 });
    log.append('stdout', Buffer.from('b'));
    expect(seqs(await early)).toEqual([2]);
    expect(vi.getTimerCount()).toBe(1);
    log.append('stdout', Buffer.from('c'));
    expect(seqs(await later)).toEqual([3]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('returns an empty result at the deadline', async () => {
    vi.useFakeTimers();
    const log = pipeLog();
    const pending = log.read({ waitMs: 250 });
    await vi.advanceTimersByTimeAsync(250);
    expect(await pending).toEqual({
      chunks: [],
      nextSeq: 1,
      exited: false,
      exitCode: null,
      closed: false,
      sandboxDenied: false,
    });
  });

  it('does not wait with waitMs 0 (the default)', async () => {
    const log = pipeLog();
    expect(await log.read()).toMatchObject({ chunks: [], nextSeq: 1 });
  });

  it('rejects with the abort reason and clears its timer', async () => {
    vi.useFakeTimers();
    const log = pipeLog();
    const controller = new AbortController();
    const pending = log.read({ waitMs: 10_000, signal: controller.signal });
    controller.abort(new Error('connection gone'));
    await expect(pending).rejects.toThrow('connection gone');
    expect(vi.getTimerCount()).toBe(0);
    // The aborted waiter is gone: later output does not touch it.
    log.append('stdout', Buffer.from('a'));
    await expect(log.read({ signal: controller.signal })).rejects.toThrow('connection gone');
  });
});

describe('onDrop', () => {
  it('hands over each chunk retention drops, oldest first, and only those', () => {
    const dropped: string[] = [];
    const log = new OutputLog({
      processId: 'p',
      streams: ['stdout'],
      maxBytes: 6,
      onDrop: (chunk) => dropped.push(chunk.toString()),
    });
    log.append('stdout', Buffer.from('aaa'));
    log.append('stdout', Buffer.from('bbb'));
    expect(dropped).toEqual([]);
    log.append('stdout', Buffer.from('cc'));
    expect(dropped).toEqual(['aaa']);
    log.append('stdout', Buffer.from('dddddd'));
    expect(dropped).toEqual(['aaa', 'bbb', 'cc']);
    expect(log.retainedBytes).toBe(6);
  });
});

describe('flow control', () => {
  const flowLog = (flowWindowBytes: number, maxChunks?: number) =>
    new OutputLog({ processId: 'p', streams: ['stdout'], maxBytes: 10, maxChunks, flowWindowBytes });

  it('retains unacknowledged output past the retention budget and blocks at the window', async () => {
    const log = flowLog(100);
    for (let i = 0; i < 9; i++) log.append('stdout', text(10));
    // 90 bytes retained although maxBytes is 10: nothing unacknowledged is dropped.
    expect(log.retainedBytes).toBe(90);
    expect(log.flowBlocked()).toBe(false);
    log.append('stdout', text(10));
    expect(log.flowBlocked()).toBe(true);
    expect(seqs(await log.read({ afterSeq: 0 }))).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  });

  it('an acknowledgement frees the output it covers and reopens the window', async () => {
    const log = flowLog(100);
    for (let i = 0; i < 10; i++) log.append('stdout', text(10));
    expect(log.ack(3)).toBe(true);
    expect(log.flowBlocked()).toBe(false);
    expect(log.unackedBytes).toBe(70);
    expect(log.retainedBytes).toBe(70);
    expect(seqs(await log.read({ afterSeq: 3 }))).toEqual([4, 5, 6, 7, 8, 9, 10]);
    // Repeated and older acknowledgements free nothing; a future one frees what there is.
    expect(log.ack(3)).toBe(false);
    expect(log.ack(1)).toBe(false);
    expect(log.ack(1_000)).toBe(true);
    expect(log.retainedBytes).toBe(0);
    expect(log.unackedBytes).toBe(0);
    log.append('stdout', text(10));
    expect(seqs(await log.read({ afterSeq: 10 }))).toEqual([11]);
  });

  it('blocks at a limit below the window (a share of the output budget)', () => {
    const log = flowLog(100);
    for (let i = 0; i < 4; i++) log.append('stdout', text(10));
    expect(log.flowBlocked()).toBe(false);
    expect(log.flowBlocked(40)).toBe(true);
    // A limit above the window does not raise it.
    for (let i = 0; i < 6; i++) log.append('stdout', text(10));
    expect(log.flowBlocked(1_000)).toBe(true);
  });

  it('also blocks at the chunk budget, so many tiny chunks cannot grow memory', () => {
    const log = flowLog(1_000_000, 4);
    for (let i = 0; i < 4; i++) log.append('stdout', text(1));
    expect(log.flowBlocked()).toBe(true);
    expect(log.ack(1)).toBe(true);
  });

  it('without a window, acknowledgements are ignored and retention drops as before', async () => {
    const log = new OutputLog({ processId: 'p', streams: ['stdout'], maxBytes: 20 });
    for (let i = 0; i < 4; i++) log.append('stdout', text(10));
    expect(log.flowWindowBytes).toBeNull();
    expect(log.flowBlocked()).toBe(false);
    expect(log.ack(4)).toBe(false);
    expect(seqs(await log.read({ afterSeq: 0 }))).toEqual([3, 4]);
  });
});
