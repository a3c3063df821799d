import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { useTables } from './__tests__/fresh-table.js';
import {
  CHILD_PATH,
  collectUntilClosed,
  eventsUntilClosed,
  isAlive,
  leadsOwnSession,
  livePidsWithEnv,
  readUntil,
  request,
  sh,
  snapshot,
  waitFor,
} from './__tests__/helpers.js';

const { table, tempDir } = useTables();

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
