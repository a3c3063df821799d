import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { useTables } from './__tests__/fresh-table.js';
import { collectUntilClosed, readUntil, request, sh, waitFor } from './__tests__/helpers.js';
import { OutputBudget } from './output-budget.js';
import type { ProcessTable } from './process-table.js';

const { table } = useTables();

describe('write', () => {
  it('follows the decision order: empty writeId, unknown, starting, stdinClosed; a refused chunk is given back', async () => {
    const processes = table();
    let released = 0;
    const release = () => void released++;
    await expect(processes.write('x', Buffer.from('a'), '', release)).rejects.toMatchObject({
      code: 'invalid_argument',
      message: 'writeId must not be empty',
    });
    expect(await processes.write('x', Buffer.from('a'), 'w', release)).toBe('unknownProcess');
    const starting = processes.start(request('cat', ['cat'], { pipeStdin: true }));
    expect(await processes.write('cat', Buffer.from('a'), 'w', release)).toBe('starting');
    await starting;
    await processes.start(request('no-stdin', ['sleep', '1000']));
    expect(await processes.write('no-stdin', Buffer.from('a'), 'w', release)).toBe('stdinClosed');
    expect(released).toBe(4);
  });

  it('dedupes writeIds, remembering the last writeIdMemory of them (FIFO); a missing writeId is never deduped', async () => {
    const processes = table({ writeIdMemory: 2 });
    await processes.start(request('cat', ['cat'], { pipeStdin: true }));
    const write = (text: string, writeId?: string) => processes.write('cat', Buffer.from(text), writeId);
    expect(await write('A', 'w1')).toBe('accepted');
    expect(await write('B', 'w1')).toBe('accepted'); // duplicate: not written
    expect(await write('C', 'w2')).toBe('accepted');
    expect(await write('D', 'w3')).toBe('accepted'); // forgets w1
    expect(await write('E', 'w1')).toBe('accepted'); // written again, forgets w2
    expect(await write('F', 'w3')).toBe('accepted'); // duplicate
    expect(await write('G', 'w2')).toBe('accepted'); // forgotten: written
    expect(await write('H')).toBe('accepted');
    expect(await write('H')).toBe('accepted');
    expect(processes.closeStdin('cat')).toBe('accepted');
    expect(await write('I', 'w9')).toBe('stdinClosed');
    const result = await collectUntilClosed(processes, 'cat');
    expect(result).toMatchObject({ output: 'ACDEGHH', exitCode: 0 });
  });

  it('closeStdin reports each state', async () => {
    const processes = table();
    expect(processes.closeStdin('nope')).toBe('unknownProcess');
    await processes.start(request('no-stdin', ['sleep', '1000']));
    expect(processes.closeStdin('no-stdin')).toBe('stdinClosed');
    await processes.start(request('tty', ['sleep', '1000'], { tty: true }));
    expect(() => processes.closeStdin('tty')).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    await processes.start(request('cat', ['cat'], { pipeStdin: true }));
    expect(processes.closeStdin('cat')).toBe('accepted');
    expect(processes.closeStdin('cat')).toBe('stdinClosed');
  });

  it('bounds queued stdin: a child that does not read makes writes wait, then fail', async () => {
    const processes = table({ stdinQueueBytes: 64 * 1024 });
    await processes.start(request('deaf', ['sleep', '1000'], { pipeStdin: true }));
    // Far more than any kernel socket buffer takes: most of it stays queued in this process.
    expect(await processes.write('deaf', Buffer.alloc(4 * 1024 * 1024), 'big')).toBe('accepted');
    let waitingSettled = false;
    const waiting = processes.write('deaf', Buffer.alloc(1024), 'waits').finally(() => {
      waitingSettled = true;
    });
    await expect(processes.write('deaf', Buffer.alloc(64 * 1024), 'over')).rejects.toMatchObject({
      code: 'write_failed',
    });
    expect(waitingSettled).toBe(false);
    // The failed write is forgotten, so its retry is not reported as a duplicate.
    await expect(processes.write('deaf', Buffer.alloc(64 * 1024), 'over')).rejects.toMatchObject({
      code: 'write_failed',
    });
    processes.terminate('deaf');
    await expect(waiting).rejects.toMatchObject({ code: 'write_failed', message: 'failed to write to process stdin' });
    await collectUntilClosed(processes, 'deaf');
    await expect(processes.write('deaf', Buffer.from('x'), 'after-exit')).rejects.toMatchObject({
      code: 'write_failed',
    });
  });

  it('keeps concurrent writes in order under backpressure', async () => {
    // Four 8 KiB writes fill the 32 KiB in flight, four more fill the waiting line: all accepted.
    const processes = table({ stdinQueueBytes: 32 * 1024 });
    await processes.start(sh('ordered', 'sleep 0.2; exec cat', { pipeStdin: true }));
    const parts = Array.from({ length: 8 }, (_, i) => Buffer.alloc(8 * 1024, 97 + i));
    const writes = parts.map((part, i) => processes.write('ordered', part, `w${i}`));
    expect(await Promise.all(writes)).toEqual(Array(8).fill('accepted'));
    processes.closeStdin('ordered');
    expect((await collectUntilClosed(processes, 'ordered')).output).toBe(Buffer.concat(parts).toString());
  });
});

describe('output backpressure', () => {
  const retainedBytes = async (processes: ProcessTable, id: string) =>
    (await processes.read(id)).chunks.reduce((total, chunk) => total + chunk.chunk.length, 0);
  /** The kernel function the process sleeps in (Linux). */
  const wchan = (pid: number) => readFileSync(`/proc/${pid}/wchan`, 'utf8');

  it('pauseOutput blocks writing children until resumeOutput, without losing output', async () => {
    for (const tty of [false, true]) {
      const processes = table({ retainedOutputBytes: 8 * 1024 * 1024 });
      processes.pauseOutput();
      processes.pauseOutput();
      const id = `flood-${tty}`;
      const { pid } = await processes.start(request(id, ['head', '-c', '1000000', '/dev/zero'], { tty }));
      // Blocked in the kernel on a full buffer: libuv's stdio "pipes" are socketpairs (sock_alloc_send_pskb);
      // a terminal writer waits in n_tty_write (wait_woken).
      await waitFor(() => /sock_alloc_send|pipe_write|tty|wait_woken/.test(wchan(pid)), `${id} to block on write`);
      expect(await retainedBytes(processes, id)).toBeLessThan(1_000_000);
      expect(processes.list()[0]?.state).toBe('running');
      processes.resumeOutput();
      const result = await collectUntilClosed(processes, id);
      expect(result.exitCode).toBe(0);
      expect(await retainedBytes(processes, id)).toBe(1_000_000);
    }
  });

  it('keeps the output of a child that exits while output is paused', async () => {
    for (const tty of [false, true]) {
      const processes = table();
      processes.pauseOutput();
      const id = `short-${tty}`;
      await processes.start(request(id, ['printf', 'hello'], { tty }));
      if (tty) {
        // node-pty reports the exit once the terminal is closed (at the latest 200 ms after the exit).
        await waitFor(() => processes.list()[0]?.state === 'closed', `${id} to close while paused`);
      }
      processes.resumeOutput();
      const result = await collectUntilClosed(processes, id);
      expect(result).toMatchObject({ output: 'hello', exitCode: 0 });
    }
  });

  it('a flow-controlled child blocks once its window is unacknowledged and runs on as acknowledgements come', async () => {
    for (const tty of [false, true]) {
      const processes = table();
      const window = 256 * 1024;
      const id = `flow-${tty}`;
      const size = 8 * 1024 * 1024;
      await processes.start(request(id, ['head', '-c', String(size), '/dev/zero'], { tty, flowWindowBytes: window }));
      await waitFor(async () => (await retainedBytes(processes, id)) >= window, `${id} to fill its window`);
      // Then nothing more is read: no more than the window and one read past it, while the child waits.
      await new Promise((resolve) => setTimeout(resolve, 300));
      const held = await retainedBytes(processes, id);
      expect(held).toBeLessThanOrEqual(window + 64 * 1024);
      expect(processes.list()[0]?.state).toBe('running');
      let total = 0;
      let afterSeq = 0;
      for (;;) {
        const answer = await processes.read(id, { afterSeq, waitMs: 1_000 });
        for (const chunk of answer.chunks) total += chunk.chunk.length;
        afterSeq = answer.nextSeq - 1;
        processes.ack(id, afterSeq);
        if (answer.closed) break;
      }
      // A PTY turns nothing into more bytes for NUL input; every byte arrived, none was dropped.
      expect(total).toBe(size);
      expect(processes.list()[0]).toMatchObject({ state: 'closed', exitCode: 0 });
      await processes.shutdown();
    }
  });

  it('an output budget shared by tables caps each process at its share, and a closed one gives its share back', async () => {
    const budget = new OutputBudget(256 * 1024);
    const first = table({ outputBudget: budget });
    const second = table({ outputBudget: budget });
    const window = 4 * 1024 * 1024;
    const size = 2 * 1024 * 1024;
    await first.start(request('a', ['head', '-c', String(size), '/dev/zero'], { flowWindowBytes: window }));
    await second.start(request('b', ['head', '-c', String(size), '/dev/zero'], { flowWindowBytes: window }));
    expect(budget.share).toBe(128 * 1024);
    await waitFor(async () => (await retainedBytes(second, 'b')) >= 128 * 1024, 'b to fill its share');
    await new Promise((resolve) => setTimeout(resolve, 300));
    // The share, not the 4 MiB window, holds it (one read may land past it).
    expect(await retainedBytes(second, 'b')).toBeLessThanOrEqual(128 * 1024 + 64 * 1024);
    // Read `a` to its end: once it closes, `b` may hold the whole budget.
    const drain = async (processes: ProcessTable, id: string) => {
      let total = 0;
      for (let afterSeq = 0; ; ) {
        const answer = await processes.read(id, { afterSeq, waitMs: 1_000 });
        for (const chunk of answer.chunks) total += chunk.chunk.length;
        afterSeq = answer.nextSeq - 1;
        processes.ack(id, afterSeq);
        if (answer.closed) return total;
      }
    };
    expect(await drain(first, 'a')).toBe(size);
    expect(budget.members).toBe(1);
    await waitFor(async () => (await retainedBytes(second, 'b')) >= 256 * 1024, 'b to take the freed share');
    expect(await drain(second, 'b')).toBe(size);
    expect(budget.members).toBe(0);
    await first.shutdown();
    await second.shutdown();
  });

  it('shutdown completes while a flow-controlled child is blocked on its window', async () => {
    const processes = table();
    await processes.start(request('yes-flow', ['yes'], { flowWindowBytes: 64 * 1024 }));
    await waitFor(async () => (await retainedBytes(processes, 'yes-flow')) >= 64 * 1024, 'the window to fill');
    await processes.shutdown();
    expect(processes.list()).toMatchObject([{ state: 'closed', exitCode: 137 }]);
  });

  it('shutdown completes while output is paused', async () => {
    const processes = table();
    await processes.start(request('yes', ['yes']));
    processes.pauseOutput();
    await processes.shutdown();
    expect(processes.list()).toMatchObject([{ state: 'closed', exitCode: 137 }]);
    expect(processes.size).toBe(1);
  });
});

describe('signals', () => {
  it('delivers every named signal to the process group', async () => {
    const processes = table();
    const names = { terminate: 'TERM', hangup: 'HUP', quit: 'QUIT', user1: 'USR1', user2: 'USR2' } as const;
    const traps = Object.values(names)
      .map((name) => `trap 'echo got:${name}' ${name}`)
      .join('; ');
    await processes.start(sh('traps', `${traps}; echo ready; while :; do :; done`));
    let output = await readUntil(processes, 'traps', 'ready\n');
    for (const [signal, name] of Object.entries(names)) {
      processes.signal('traps', signal as keyof typeof names);
      output = await readUntil(processes, 'traps', `got:${name}`);
    }
    processes.signal('traps', 'kill');
    const result = await collectUntilClosed(processes, 'traps');
    expect(result.exitCode).toBe(137);
    expect(output).toContain('got:USR2');
  });

  it('is a no-op for unknown, starting and exited processes, and rejects unknown names', async () => {
    const processes = table();
    processes.signal('nope', 'interrupt');
    const starting = processes.start(request('s', ['true']));
    processes.signal('s', 'kill');
    await starting;
    await collectUntilClosed(processes, 's');
    processes.signal('s', 'interrupt');
    expect(() => processes.signal('s', 'bogus' as 'kill')).toThrow(
      expect.objectContaining({ code: 'invalid_argument', message: 'unknown signal bogus' }),
    );
  });

  it('interrupts a tty process group too', async () => {
    const processes = table();
    await processes.start(
      sh('tty-int', "trap 'echo caught; exit 5' INT; echo ready; while :; do :; done", { tty: true }),
    );
    await readUntil(processes, 'tty-int', 'ready');
    processes.signal('tty-int', 'interrupt');
    const result = await collectUntilClosed(processes, 'tty-int');
    expect(result.output).toContain('caught');
    expect(result.exitCode).toBe(5);
  });
});
