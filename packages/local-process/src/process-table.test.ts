import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  CHILD_PATH,
  collectUntilClosed,
  isAlive,
  livePidsWithEnv,
  readUntil,
  request,
  sh,
  waitFor,
} from './__tests__/helpers.js';
import { OutputBudget } from './output-budget.js';
import { ProcessTable } from './process-table.js';
import type { ProcessEvent, ProcessTableOptions } from './types.js';

let tables: ProcessTable[] = [];
const tempDirs: string[] = [];

function table(options: ProcessTableOptions = {}): ProcessTable {
  const created = new ProcessTable(options);
  tables.push(created);
  return created;
}

function tempDir(): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'local-process-'));
  tempDirs.push(dir);
  return dir;
}

afterEach(async () => {
  await Promise.all(tables.map((created) => created.shutdown()));
  tables = [];
  for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** Whether `pid` leads its own session and process group (Linux /proc/<pid>/stat: pgid and sid). */
function leadsOwnSession(pid: number): boolean {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const [, , pgid, sid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(pgid) === pid && Number(sid) === pid;
}

/** Event snapshots as the seed compares them. */
function snapshot(event: ProcessEvent): unknown {
  if (event.kind === 'output') return { seq: event.seq, stream: event.stream, text: event.chunk.toString() };
  if (event.kind === 'exited') return { seq: event.seq, exitCode: event.exitCode };
  return { seq: event.seq, closed: true };
}

function eventsUntilClosed(): { onEvent: (event: ProcessEvent) => void; closed: Promise<ProcessEvent[]> } {
  const events: ProcessEvent[] = [];
  let resolve!: (events: ProcessEvent[]) => void;
  const closed = new Promise<ProcessEvent[]>((done) => {
    resolve = done;
  });
  return {
    onEvent: (event) => {
      events.push(event);
      if (event.kind === 'closed') resolve(events);
    },
    closed,
  };
}

describe('seed scenarios (exec_process.rs, local backend)', () => {
  it('starts and exits: `true` with env {} exits 0 and reaches closed', async () => {
    const processes = table();
    const started = await processes.start(request('proc-1', ['true'], { env: {} }));
    expect(started.processId).toBe('proc-1');
    expect(started.pid).toBeGreaterThan(1);
    const result = await collectUntilClosed(processes, 'proc-1');
    expect(result).toMatchObject({ output: '', exitCode: 0, closed: true });
  });

  it('streams delayed output, collected exactly through reads', async () => {
    const processes = table();
    await processes.start(sh('proc-stream', "sleep 0.05; printf 'session output\\n'", { env: {} }));
    const result = await collectUntilClosed(processes, 'proc-stream');
    expect(result).toMatchObject({ output: 'session output\n', exitCode: 0, closed: true });
  });

  it('pushes events: stdout 1, stderr 2, exited 3 (code 7), closed 4', async () => {
    const { onEvent, closed } = eventsUntilClosed();
    const processes = table({ onEvent });
    await processes.start(
      sh('proc-events', "printf 'event output\\n'; sleep 0.1; printf 'event err\\n' >&2; sleep 0.1; exit 7", {
        env: {},
      }),
    );
    expect((await closed).map(snapshot)).toEqual([
      { seq: 1, stream: 'stdout', text: 'event output\n' },
      { seq: 2, stream: 'stderr', text: 'event err\n' },
      { seq: 3, exitCode: 7 },
      { seq: 4, closed: true },
    ]);
  });

  it('replays everything after close: reads from seq 0 return what the events carried', async () => {
    const { onEvent, closed } = eventsUntilClosed();
    const processes = table({ onEvent });
    await processes.start(sh('proc-events-late', "printf 'late one\\n'; printf 'late two\\n'", { env: {} }));
    const events = await closed;
    const pushed = events
      .filter((event) => event.kind === 'output')
      .map((event) => event.chunk.toString())
      .join('');
    expect(pushed).toBe('late one\nlate two\n');

    const first = await collectUntilClosed(processes, 'proc-events-late');
    expect(first).toMatchObject({ output: 'late one\nlate two\n', exitCode: 0, closed: true });
    const replay = await processes.read('proc-events-late');
    expect(replay.chunks.map((chunk) => chunk.chunk.toString()).join('')).toBe('late one\nlate two\n');
    expect(replay.chunks.every((chunk) => chunk.stream === 'stdout')).toBe(true);
    expect(replay).toMatchObject({ exited: true, exitCode: 0, closed: true, nextSeq: events.length + 1 });
  });

  it('retains output after exit until the streams close', async () => {
    const processes = table();
    const release = path.join(tempDir(), 'release-delayed-output');
    await processes.start(
      sh(
        'proc-output-after-exit',
        '(while [ ! -f "$REL" ]; do sleep 0.01; done; echo late output after exit) & exit 0',
        {
          env: { PATH: CHILD_PATH, REL: release },
        },
      ),
    );
    const exit = await processes.read('proc-output-after-exit', { waitMs: 2_000 });
    expect(exit.chunks).toEqual([]);
    expect(exit.exitCode).toBe(0);
    expect(exit.closed).toBe(false);
    const exitSeq = exit.nextSeq - 1;
    expect(exitSeq).toBe(1);
    writeFileSync(release, 'go');

    const late = await processes.read('proc-output-after-exit', { afterSeq: exitSeq, waitMs: 2_000 });
    expect(late.chunks.map((chunk) => [chunk.seq, chunk.stream, chunk.chunk.toString()])).toEqual([
      [2, 'stdout', 'late output after exit\n'],
    ]);

    const all = await collectUntilClosed(processes, 'proc-output-after-exit');
    expect(all).toMatchObject({ output: 'late output after exit\n', exitCode: 0, closed: true });
    expect(all.last.nextSeq).toBe(4);
  });

  it('tty: a write reaches the child and its answer is read', async () => {
    const processes = table();
    await processes.start(
      sh('proc-stdin', 'IFS= read line; printf \'from-stdin:%s\\n\' "$line"', { env: {}, tty: true }),
    );
    expect(await processes.write('proc-stdin', Buffer.from('hello\n'), 'w-1')).toBe('accepted');
    const result = await collectUntilClosed(processes, 'proc-stdin');
    expect(result.output).toContain('from-stdin:hello');
    expect(result.exitCode).toBe(0);
    expect(result.closed).toBe(true);
  });

  it('pipeStdin: write returns accepted and the child reads it', async () => {
    const processes = table();
    await processes.start(
      sh('proc-stdin-pipe', 'IFS= read line; printf \'from-stdin:%s\\n\' "$line"', { env: {}, pipeStdin: true }),
    );
    expect(await processes.write('proc-stdin-pipe', Buffer.from('hello\n'), 'w-1')).toBe('accepted');
    const result = await collectUntilClosed(processes, 'proc-stdin-pipe');
    expect(result).toMatchObject({ output: 'from-stdin:hello\n', exitCode: 0, closed: true });
  });

  it('without pipeStdin a write reports stdinClosed and the child reads EOF', async () => {
    const processes = table();
    await processes.start(
      sh(
        'proc-stdin-closed',
        "sleep 0.3; if IFS= read -r line; then printf 'read:%s\\n' \"$line\"; else printf 'eof\\n'; fi",
        {
          env: { PATH: CHILD_PATH },
        },
      ),
    );
    expect(await processes.write('proc-stdin-closed', Buffer.from('ignored\n'), 'w-1')).toBe('stdinClosed');
    const result = await collectUntilClosed(processes, 'proc-stdin-closed');
    expect(result).toMatchObject({ output: 'eof\n', exitCode: 0, closed: true });
  });

  it('interrupt triggers the INT trap: exit code 7', async () => {
    const processes = table();
    await processes.start(
      sh('proc-signal', "trap 'printf \"signal:2\\n\"; exit 7' INT; printf 'ready\\n'; while :; do :; done", {
        env: {},
      }),
    );
    await readUntil(processes, 'proc-signal', 'ready\n');
    processes.signal('proc-signal', 'interrupt');
    const result = await collectUntilClosed(processes, 'proc-signal');
    expect(result.output).toContain('signal:2');
    expect(result.exitCode).toBe(7);
    expect(result.closed).toBe(true);
  });

  it('preserves output produced before anyone reads', async () => {
    const processes = table();
    await processes.start(sh('proc-queued', "printf 'queued output\\n'", { env: {} }));
    await waitFor(() => processes.list()[0]?.state === 'closed', 'proc-queued to close');
    const result = await collectUntilClosed(processes, 'proc-queued');
    expect(result).toMatchObject({ output: 'queued output\n', exitCode: 0, closed: true });
  });
});

describe('read', () => {
  it('pages a real process output with maxBytes', async () => {
    const processes = table();
    await processes.start(sh('paged', "printf 'aaaa'; sleep 0.05; printf 'bbbb'; sleep 0.05; printf 'cccc'"));
    await collectUntilClosed(processes, 'paged');
    const page1 = await processes.read('paged', { maxBytes: 6 });
    expect(page1.chunks.map((chunk) => chunk.chunk.toString())).toEqual(['aaaa']);
    expect(page1.nextSeq).toBe(page1.chunks[0]!.seq + 1);
    const page2 = await processes.read('paged', { afterSeq: page1.nextSeq - 1, maxBytes: 8 });
    expect(page2.chunks.map((chunk) => chunk.chunk.toString())).toEqual(['bbbb', 'cccc']);
    expect(page2.closed).toBe(true);
  });

  it('retains only the newest chunks within the table limits', async () => {
    const bytes = table({ retainedOutputBytes: 8 });
    const chunks = table({ retainedOutputChunks: 1 });
    const script = "printf 'one\\n'; sleep 0.05; printf 'two\\n'; sleep 0.05; printf 'three\\n'";
    await bytes.start(sh('by-bytes', script));
    await chunks.start(sh('by-chunks', script));
    // 'three\n' alone is 6 bytes; with 'two\n' it would be 10 > 8.
    expect((await collectUntilClosed(bytes, 'by-bytes')).output).toBe('one\ntwo\nthree\n');
    expect((await bytes.read('by-bytes')).chunks.map((chunk) => chunk.chunk.toString())).toEqual(['three\n']);
    await collectUntilClosed(chunks, 'by-chunks');
    const retained = await chunks.read('by-chunks');
    expect(retained.chunks.map((chunk) => [chunk.seq, chunk.chunk.toString()])).toEqual([[3, 'three\n']]);
  });

  it('reports unknown and starting ids', async () => {
    const processes = table();
    await expect(processes.read('nope')).rejects.toMatchObject({
      name: 'ProcessError',
      code: 'unknown_process',
      message: 'unknown process id nope',
    });
    const starting = processes.start(request('slow', ['true']));
    await expect(processes.read('slow')).rejects.toMatchObject({
      code: 'starting',
      message: 'process id slow is starting',
    });
    expect(processes.list()).toMatchObject([{ processId: 'slow', state: 'starting', pid: null }]);
    await starting;
  });

  it('a long poll ends early when its signal aborts', async () => {
    const processes = table();
    await processes.start(request('sleeper', ['sleep', '1000']));
    const controller = new AbortController();
    const pending = processes.read('sleeper', { waitMs: 60_000, signal: controller.signal });
    controller.abort(new Error('session taken over'));
    await expect(pending).rejects.toThrow('session taken over');
  });
});

describe('lifecycle', () => {
  it('evicts a closed process after the retention and lets the id be reused', async () => {
    const processes = table({ exitedRetentionMs: 50 });
    await processes.start(sh('reuse', 'echo first'));
    expect((await collectUntilClosed(processes, 'reuse')).output).toBe('first\n');
    await waitFor(() => processes.list().length === 0, 'eviction');
    await expect(processes.read('reuse')).rejects.toMatchObject({ code: 'unknown_process' });
    expect(await processes.write('reuse', Buffer.from('x'), 'w')).toBe('unknownProcess');
    expect(processes.terminate('reuse')).toEqual({ running: false });
    await processes.start(sh('reuse', 'echo second'));
    expect((await collectUntilClosed(processes, 'reuse')).output).toBe('second\n');
  });

  it('keeps a closed process readable until its retention ends', async () => {
    const processes = table({ exitedRetentionMs: 60_000 });
    await processes.start(sh('kept', 'echo kept'));
    await collectUntilClosed(processes, 'kept');
    expect(processes.list()).toMatchObject([{ processId: 'kept', state: 'closed', exitCode: 0, nextSeq: 4 }]);
    await expect(processes.start(request('kept', ['true']))).rejects.toMatchObject({
      code: 'already_exists',
      message: 'process kept already exists',
    });
  });

  it('two concurrent starts of one id: exactly one succeeds', async () => {
    const processes = table();
    const results = await Promise.allSettled([
      processes.start(request('proc-1', ['sleep', '1000'])),
      processes.start(request('proc-1', ['sleep', '1000'])),
    ]);
    expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(1);
    const rejected = results.filter((result) => result.status === 'rejected');
    expect(rejected).toHaveLength(1);
    expect((rejected[0] as PromiseRejectedResult).reason).toMatchObject({
      code: 'already_exists',
      message: 'process proc-1 already exists',
    });
  });

  it('terminate during start cancels it and kills the child that was spawned', async () => {
    const processes = table();
    const marker = randomUUID();
    const starting = processes.start(
      request('cancel-me', ['sleep', '1000'], { env: { PATH: CHILD_PATH, MARK: marker } }),
    );
    expect(processes.terminate('cancel-me')).toEqual({ running: true });
    await expect(starting).rejects.toMatchObject({
      code: 'start_cancelled',
      message: 'process cancel-me start was cancelled',
    });
    await waitFor(() => livePidsWithEnv('MARK', marker).length === 0, 'the cancelled child to die');
    expect(processes.list()).toEqual([]);
    await processes.start(sh('cancel-me', 'exit 0'));
  });

  it('a failed spawn releases the id', async () => {
    const processes = table();
    await expect(processes.start(request('again', ['definitely-not-a-program-xyz']))).rejects.toMatchObject({
      code: 'spawn_failed',
    });
    expect(processes.list()).toEqual([]);
    await processes.start(sh('again', 'exit 0'));
  });

  it('rejects empty argv and too many processes', async () => {
    const processes = table({ maxProcesses: 1 });
    await expect(processes.start(request('empty', []))).rejects.toMatchObject({
      code: 'invalid_argument',
      message: 'argv must not be empty',
    });
    await processes.start(request('one', ['sleep', '1000']));
    await expect(processes.start(request('two', ['true']))).rejects.toMatchObject({ code: 'too_many_processes' });
  });

  it('terminate kills a running process (exit 137) and reports false once it has exited', async () => {
    const processes = table();
    await processes.start(request('victim', ['sleep', '1000']));
    expect(processes.terminate('victim')).toEqual({ running: true });
    const result = await collectUntilClosed(processes, 'victim');
    expect(result).toMatchObject({ exitCode: 137, closed: true });
    expect(processes.terminate('victim')).toEqual({ running: false });
    expect(processes.terminate('unknown')).toEqual({ running: false });
  });

  it('terminate after a normal exit reports running false', async () => {
    const processes = table();
    await processes.start(request('done', ['true']));
    expect(await processes.read('done', { waitMs: 5_000 })).toMatchObject({ exited: true, exitCode: 0 });
    expect(processes.terminate('done')).toEqual({ running: false });
    expect((await collectUntilClosed(processes, 'done')).exitCode).toBe(0);
  });

  it('terminate kills the whole process group, backgrounded grandchildren included', async () => {
    for (const tty of [false, true]) {
      const processes = table();
      const id = `group-${tty}`;
      await processes.start(sh(id, 'sleep 1000 & echo "grandchild:$!"; wait', { tty }));
      const output = await readUntil(processes, id, '\n');
      const grandchild = Number(/grandchild:(\d+)/.exec(output)![1]);
      expect(isAlive(grandchild)).toBe(true);
      expect(processes.terminate(id)).toEqual({ running: true });
      await waitFor(() => !isAlive(grandchild), `grandchild ${grandchild} to die`);
      // Codex: 137 (128 + SIGKILL) for a pipe child, 1 for a PTY child.
      expect((await collectUntilClosed(processes, id)).exitCode).toBe(tty ? 1 : 137);
    }
  });

  it('terminate and shutdown kill descendants that left the group with setsid, tty or not', async () => {
    const strays: number[] = [];
    try {
      for (const tty of [false, true]) {
        const processes = table();
        // `setsid` under a shell that waits: a new session and group, out of reach of the group kill.
        for (const id of ['terminated', 'shut-down']) {
          await processes.start(sh(id, 'setsid sleep 1000 & echo "stray:$!"; wait', { tty }));
          const stray = Number(/stray:(\d+)/.exec(await readUntil(processes, id, '\n'))![1]);
          strays.push(stray);
          // Once setsid(1) has run, the stray leads a session and group of its own.
          await waitFor(() => leadsOwnSession(stray), `pid ${stray} to call setsid`);
        }
        expect(processes.terminate('terminated')).toEqual({ running: true });
        await waitFor(() => !isAlive(strays.at(-2)!), `the terminated process's stray ${strays.at(-2)} to die`);
        await processes.shutdown();
        await waitFor(() => !isAlive(strays.at(-1)!), `the shut-down process's stray ${strays.at(-1)} to die`);
      }
    } finally {
      for (const pid of strays) if (isAlive(pid)) process.kill(pid, 'SIGKILL');
    }
  });

  it('shutdown kills every process, waits for them, and refuses new starts', async () => {
    const processes = table();
    const pids: number[] = [];
    pids.push((await processes.start(request('plain', ['sleep', '1000']))).pid);
    pids.push((await processes.start(request('tty', ['sleep', '1000'], { tty: true }))).pid);
    await processes.start(sh('tree', 'sleep 1000 & echo "grandchild:$!"; wait'));
    const output = await readUntil(processes, 'tree', '\n');
    pids.push(Number(/grandchild:(\d+)/.exec(output)![1]));
    await processes.start(request('stdin', ['cat'], { pipeStdin: true }));
    const starting = expect(processes.start(request('late', ['sleep', '1000']))).rejects.toMatchObject({
      code: 'start_cancelled',
    });

    await processes.shutdown();
    await starting;
    for (const pid of pids) await waitFor(() => !isAlive(pid), `pid ${pid} to die`);
    expect(processes.list().map((summary) => summary.state)).toEqual(['closed', 'closed', 'closed', 'closed']);
    await expect(processes.start(request('after', ['true']))).rejects.toMatchObject({ code: 'shut_down' });
    await processes.shutdown();
  });
});

describe('write', () => {
  it('follows the decision order: empty writeId, unknown, starting, stdinClosed', async () => {
    const processes = table();
    await expect(processes.write('x', Buffer.from('a'), '')).rejects.toMatchObject({
      code: 'invalid_argument',
      message: 'writeId must not be empty',
    });
    expect(await processes.write('x', Buffer.from('a'), 'w')).toBe('unknownProcess');
    const starting = processes.start(request('cat', ['cat'], { pipeStdin: true }));
    expect(await processes.write('cat', Buffer.from('a'), 'w')).toBe('starting');
    await starting;
    await processes.start(request('no-stdin', ['sleep', '1000']));
    expect(await processes.write('no-stdin', Buffer.from('a'), 'w')).toBe('stdinClosed');
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
