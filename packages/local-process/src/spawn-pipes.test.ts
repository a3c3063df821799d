/** Spawning straight through spawnProcess: the events a sink sees, real pipes (pipe2, not socketpairs), and the fallback without the addon. */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { ReadBufferPool } from '@tether/bytes';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { useFreshTable } from './__tests__/fresh-table.js';
import { CHILD_PATH, collectUntilClosed, isAlive, readUntil, request, sh, waitFor } from './__tests__/helpers.js';
import { pipeStdio, type SpawnedProcess, type SpawnOptions, spawnProcess } from './spawn.js';
import type { OutputStream } from './types.js';

const { fresh, run, table: current } = useFreshTable();

/** A direct spawn whose sink records every event, in order, as `output:<stream>`, `end:<stream>`, `exit:<code>`. */
interface Recorded {
  child: SpawnedProcess;
  events: string[];
  /** Bytes per stream. */
  bytes: Record<'stdout' | 'stderr', number>;
  /** Settles once both streams ended and the child was reaped. */
  done: Promise<void>;
}

const spawned: SpawnedProcess[] = [];
const strays: number[] = [];

afterEach(async () => {
  for (const child of spawned.splice(0)) {
    child.kill();
    await child.exited;
    child.destroyStreams();
  }
  for (const pid of strays.splice(0)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
});

async function spawnRecorded(
  argv: string[],
  overrides: Partial<SpawnOptions> = {},
  onOutput: (stream: OutputStream, chunk: Buffer) => void = () => {},
): Promise<Recorded> {
  const events: string[] = [];
  const bytes = { stdout: 0, stderr: 0 };
  let ends = 0;
  let streamsEnded!: () => void;
  const ended = new Promise<void>((resolve) => {
    streamsEnded = resolve;
  });
  const child = await spawnProcess(
    { argv, cwd: '/', env: { PATH: CHILD_PATH }, tty: false, pipeStdin: false, serverPath: undefined, ...overrides },
    {
      output: (stream, chunk) => {
        if (events.at(-1) !== `output:${stream}`) events.push(`output:${stream}`);
        bytes[stream as 'stdout' | 'stderr'] += chunk.length;
        onOutput(stream, chunk);
      },
      streamEnd: (stream) => {
        events.push(`end:${stream}`);
        if (++ends === 2) streamsEnded();
      },
      exit: (exitCode) => events.push(`exit:${exitCode}`),
    },
  );
  spawned.push(child);
  return { child, events, bytes, done: Promise.all([ended, child.exited]).then(() => {}) };
}

/** `[fd, link target]` of every open fd of `pid`. */
function fdsOf(pid: number): [string, string][] {
  return readdirSync(`/proc/${pid}/fd`)
    .sort((a, b) => Number(a) - Number(b))
    .map((fd) => [fd, readlinkSync(`/proc/${pid}/fd/${fd}`)]);
}

/**
 * This process's fds above 2 that every child inherits (not close-on-exec): ones the test runner was
 * started with, not ours.
 */
function inheritableFds(): string[] {
  const O_CLOEXEC = 0o2000000;
  return readdirSync('/proc/self/fd').filter((fd) => {
    if (Number(fd) <= 2) return false;
    try {
      const flags = readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8').match(/^flags:\s*([0-7]+)/m)?.[1];
      return flags !== undefined && (Number.parseInt(flags, 8) & O_CLOEXEC) === 0;
    } catch {
      return false; // the directory listing's own fd, closed by now
    }
  });
}

/** Bytes `pid` has written so far (Linux /proc/<pid>/io). */
function bytesWritten(pid: number): number {
  const line = readFileSync(`/proc/${pid}/io`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('wchar:'));
  return Number(line!.slice('wchar:'.length));
}

/** 4-byte big-endian word i at offset 4i, written in 1 MiB blocks: a byte out of place changes the hash. */
const PATTERN_SCRIPT =
  'const total = Number(process.argv[1]); const block = Buffer.alloc(1 << 20);' +
  'let w = 0; (function next() { while (w * 4 < total) { for (let i = 0; i < block.length; i += 4) block.writeUInt32BE(w++, i);' +
  'if (!process.stdout.write(block)) return process.stdout.once("drain", next); } })();';

function patternDigest(total: number): string {
  const block = Buffer.alloc(1 << 20);
  const hash = createHash('sha256');
  for (let w = 0; w * 4 < total; ) {
    for (let i = 0; i < block.length; i += 4) block.writeUInt32BE(w++, i);
    hash.update(block);
  }
  return hash.digest('hex');
}

describe('pipe stdio (pipe2, not socketpairs)', () => {
  // CI builds @tether/native-pipe (TETHER_NATIVE_PIPE=require): without it these are failures, not skips.
  it('is what this build uses', () => {
    expect(pipeStdio()).toEqual({ kind: 'pipe', reason: null });
  });

  it('gives the child FIFOs on fds 1 and 2, and on fd 0 with pipeStdin', async () => {
    fresh();
    const script = 'stat -L -c %F /proc/self/fd/0 /proc/self/fd/1 /proc/self/fd/2';
    expect(await run(sh('no-stdin', script))).toMatchObject({
      output: 'character special file\nfifo\nfifo\n',
      exitCode: 0,
    });
    const table = current();
    await table.start(sh('stdin', script, { pipeStdin: true }));
    expect(await collectUntilClosed(table, 'stdin')).toMatchObject({ output: 'fifo\nfifo\nfifo\n', exitCode: 0 });
  });

  it('lets the child open /dev/stdout and /dev/stderr', async () => {
    const table = fresh();
    await table.start(sh('dev', 'echo out > /dev/stdout; echo err > /dev/stderr'));
    expect((await collectUntilClosed(table, 'dev')).exitCode).toBe(0);
    const { chunks } = await table.read('dev');
    expect(chunks.map((chunk) => [chunk.stream, chunk.chunk.toString()]).sort()).toEqual([
      ['stderr', 'err\n'],
      ['stdout', 'out\n'],
    ]);
  });

  it('runs `tee /dev/stderr`, and `cat /dev/stdin` on a piped stdin', async () => {
    const table = fresh();
    await table.start(sh('tee', 'printf "one\\ntwo\\n" | tee /dev/stderr'));
    expect((await collectUntilClosed(table, 'tee')).exitCode).toBe(0);
    const text = async (id: string, stream: OutputStream) =>
      (await table.read(id)).chunks
        .filter((chunk) => chunk.stream === stream)
        .map((chunk) => chunk.chunk.toString())
        .join('');
    expect(await text('tee', 'stdout')).toBe('one\ntwo\n');
    expect(await text('tee', 'stderr')).toBe('one\ntwo\n');

    await table.start(request('cat', ['cat', '/dev/stdin'], { pipeStdin: true }));
    expect(await table.write('cat', Buffer.from('through stdin\n'), 'w1')).toBe('accepted');
    expect(table.closeStdin('cat')).toBe('accepted');
    expect(await collectUntilClosed(table, 'cat')).toMatchObject({ output: 'through stdin\n', exitCode: 0 });
  });

  it('keeps no write end here: stdout ends when the child closes it, long before the child exits', async () => {
    const { events, done } = await spawnRecorded(['/bin/sh', '-c', 'exec >&-; sleep 0.5; echo late >&2']);
    await done;
    // The exit and stderr's EOF come in either order; stdout's EOF came half a second before both.
    expect(events.slice(0, 2)).toEqual(['end:stdout', 'output:stderr']);
    expect(events.slice(2).sort()).toEqual(['end:stderr', 'exit:0']);
  });

  it('keeps each child to its own pipes: two started together share no end, and each sees EOF', async () => {
    const table = fresh();
    // Started back to back; the second must inherit none of the first's ends, which this process holds
    // (its stdin's write end, its stdout's and stderr's read ends) while the first runs.
    const [cat, sleeper] = await Promise.all([
      table.start(request('cat', ['cat'], { pipeStdin: true })),
      table.start(request('sleeper', ['sleep', '30'], { pipeStdin: true })),
    ]);
    const inherited = inheritableFds();
    const catFds = fdsOf(cat.pid).filter(([fd]) => !inherited.includes(fd));
    const sleeperFds = fdsOf(sleeper.pid).filter(([fd]) => !inherited.includes(fd));
    expect(catFds.map(([fd]) => fd)).toEqual(['0', '1', '2']);
    expect(sleeperFds.map(([fd]) => fd)).toEqual(['0', '1', '2']);
    for (const [, target] of [...catFds, ...sleeperFds]) expect(target).toMatch(/^pipe:\[\d+\]$/);
    const pipesOf = (fds: [string, string][]) => new Set(fds.map(([, target]) => target));
    expect([...pipesOf(catFds)].filter((target) => pipesOf(sleeperFds).has(target))).toEqual([]);
    expect(pipesOf(catFds).size).toBe(3);
    // cat exits on its stdin's EOF, which comes only if no one else holds the write end.
    expect(await table.write('cat', Buffer.from('hello\n'), 'w')).toBe('accepted');
    expect(table.closeStdin('cat')).toBe('accepted');
    expect(await collectUntilClosed(table, 'cat')).toMatchObject({ output: 'hello\n', exitCode: 0, closed: true });
    expect(table.list().find((entry) => entry.processId === 'sleeper')?.state).toBe('running');
  });

  for (const pooled of [false, true]) {
    it(`delivers 64 MiB on both streams intact while output is paused and resumed${pooled ? ' (pooled reads)' : ''}`, async () => {
      const total = 64 * 1024 * 1024;
      const pool = pooled ? new ReadBufferPool() : null;
      const hashes = { stdout: createHash('sha256'), stderr: createHash('sha256') };
      const { child, bytes, done } = await spawnRecorded(
        ['/bin/sh', '-c', '"$0" -e "$1" "$2" | tee /dev/stderr', process.execPath, PATTERN_SCRIPT, String(total)],
        { readBuffers: pool },
        (stream, chunk) => {
          hashes[stream as 'stdout' | 'stderr'].update(chunk);
          pool?.release(chunk); // consumed: the buffer may be read into again
        },
      );
      let paused = false;
      const toggler = setInterval(() => {
        paused = !paused;
        child.pauseOutput(paused);
      }, 3);
      try {
        await done;
      } finally {
        clearInterval(toggler);
      }
      const expected = patternDigest(total);
      expect(bytes).toEqual({ stdout: total, stderr: total });
      expect(hashes.stdout.digest('hex')).toBe(expected);
      expect(hashes.stderr.digest('hex')).toBe(expected);
      if (pool) expect(pool.createdBuffers).toBeLessThan(64);
    }, 60_000);
  }

  for (const pooled of [false, true]) {
    it(`blocks a paused child on its write: it gets no further than a pipe buffer past what was read${pooled ? ' (pooled reads)' : ''}`, async () => {
      const total = 8 * 1024 * 1024;
      const { child, bytes, done } = await spawnRecorded(['head', '-c', String(total), '/dev/zero'], {
        readBuffers: pooled ? new ReadBufferPool() : null,
      });
      child.pauseOutput(true);
      // Blocked for good: in a write (to a pipe; a socket's write waits in sock_alloc_send_pskb), and no byte
      // further for 300 ms.
      let written = -1;
      await waitFor(async () => {
        const before = bytesWritten(child.pid);
        await new Promise((resolve) => setTimeout(resolve, 300));
        written = bytesWritten(child.pid);
        const wchan = readFileSync(`/proc/${child.pid}/wchan`, 'utf8');
        return written === before && /pipe_write|sock_alloc_send/.test(wchan);
      }, 'head to block');
      // Nothing was delivered while paused; beyond that, the 64 KiB pipe and at most one 64 KiB read that
      // the paused stream kept, plus a few bytes /proc counts from before the exec (libuv's forked child writes
      // one), plus some of head's 8 KiB writes: libuv reads a readable pipe several times in one turn, so the
      // read the pause caught may be followed by short ones. CI runs under load counted 139265 = 128 KiB + 8 KiB
      // + 1, 151553 = 128 KiB + 20 KiB + 1, and on 2026-12-08 172033 = 128 KiB + 40 KiB + 1; a quiet machine
      // 65537 to 131073. The bound, 224 KiB, is a third above the most seen: what it guards is that a paused
      // child is held to a few pipe buffers instead of being read on without end. (It does not tell pipes from
      // socketpairs: with TETHER_NATIVE_PIPE=off head got 114689 bytes out on 2026-12-08; the FIFO tests above
      // do that.)
      expect(bytes.stdout).toBe(0);
      expect(written).toBeLessThanOrEqual(224 * 1024 + 64);
      child.pauseOutput(false);
      await done;
      expect(bytes.stdout).toBe(total);
    });
  }

  it('shutdown closes the pipes a descendant outside the group holds, and its next write fails', async () => {
    const table = fresh();
    // The descendant leaves the group (setsid), so the group kill misses it; it writes only after the
    // shutdown's grace, and dies of SIGPIPE then unless something else still holds a read end.
    await table.start(sh('stray', 'setsid /bin/sh -c "sleep 3; while echo late; do sleep 0.05; done" & echo $!'));
    const pid = Number((await readUntil(table, 'stray', '\n')).trim());
    strays.push(pid);
    await waitFor(() => table.list()[0]?.state === 'exited', 'the child to exit');
    expect(isAlive(pid)).toBe(true);
    await table.shutdown();
    expect(table.list()[0]?.state).toBe('closed');
    expect(isAlive(pid)).toBe(true);
    await waitFor(() => !isAlive(pid), 'the descendant to die of SIGPIPE', 10_000);
  });
});

describe('without the pipe addon', () => {
  afterEach(() => {
    vi.doUnmock('@tether/native-pipe');
    vi.resetModules();
    vi.restoreAllMocks();
    vi.unstubAllEnvs();
  });

  it('falls back to socketpairs, says so once, and still runs pipe children', async () => {
    vi.resetModules();
    vi.stubEnv('TETHER_NATIVE_PIPE', ''); // not switched off on purpose: the addon is missing
    vi.doMock('@tether/native-pipe', () => ({
      loadNativePipe: () => null,
      nativePipeUnavailableReason: () => "Cannot find module '../native/build/Release/tether_pipe.node'",
    }));
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    const fallback = await import('./spawn.js');
    expect(fallback.pipeStdio()).toEqual({
      kind: 'socketpair',
      reason: "Cannot find module '../native/build/Release/tether_pipe.node'",
    });
    for (let i = 0; i < 2; i++) {
      let output = '';
      let ends = 0;
      const child = await fallback.spawnProcess(
        {
          argv: ['/bin/sh', '-c', 'stat -L -c %F /proc/self/fd/1; cat'],
          cwd: '/',
          env: { PATH: CHILD_PATH },
          tty: false,
          pipeStdin: true,
          serverPath: undefined,
        },
        { output: (_stream, chunk) => (output += chunk.toString()), streamEnd: () => void ends++, exit: () => {} },
      );
      child.stdin!.end('piped\n');
      await child.exited;
      await waitFor(() => ends === 2, 'both streams to end');
      expect(output).toBe('socket\npiped\n');
    }
    expect(warn).toHaveBeenCalledTimes(1);
    expect(warn.mock.calls[0]).toEqual([
      expect.stringContaining('cannot open /dev/stdout or /dev/stderr (@tether/native-pipe: Cannot find module'),
      { code: 'TETHER_NO_NATIVE_PIPE' },
    ]);
  });
});
