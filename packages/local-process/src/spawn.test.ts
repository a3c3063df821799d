import { createHash } from 'node:crypto';
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import path from 'node:path';
import { ReadBufferPool } from '@tether/bytes';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { CHILD_PATH, collectUntilClosed, isAlive, readUntil, request, sh, waitFor } from './__tests__/helpers.js';
import { ProcessTable } from './process-table.js';
import { pipeStdio, type SpawnedProcess, type SpawnOptions, spawnProcess } from './spawn.js';
import type { OutputStream } from './types.js';

let processes: ProcessTable | undefined;
const tempDirs: string[] = [];

function tempDir(): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'local-process-spawn-'));
  tempDirs.push(dir);
  return dir;
}

afterEach(async () => {
  await processes?.shutdown();
  processes = undefined;
  for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function run(req: Parameters<ProcessTable['start']>[0]) {
  if (processes === undefined) throw new Error('call fresh() first');
  await processes.start(req);
  return collectUntilClosed(processes, req.processId);
}

function fresh(): ProcessTable {
  processes = new ProcessTable();
  return processes;
}

describe('program resolution', () => {
  it('fails clearly for a missing binary, keeping the OS text', async () => {
    const table = fresh();
    await expect(table.start(request('missing', ['definitely-not-a-program-xyz']))).rejects.toMatchObject({
      name: 'ProcessError',
      code: 'spawn_failed',
      message: 'No such file or directory (os error 2)',
      osCode: 'ENOENT',
    });
    await expect(table.start(request('missing', ['/no/such/dir/prog']))).rejects.toMatchObject({
      code: 'spawn_failed',
      message: 'No such file or directory (os error 2)',
    });
  });

  it('reports a file that is not executable as permission denied', async () => {
    const table = fresh();
    const dir = tempDir();
    writeFileSync(path.join(dir, 'script'), '#!/bin/sh\necho hi\n');
    await expect(table.start(request('denied', [path.join(dir, 'script')]))).rejects.toMatchObject({
      code: 'spawn_failed',
      message: 'Permission denied (os error 13)',
      osCode: 'EACCES',
    });
    await expect(table.start(request('denied', ['script'], { env: { PATH: dir } }))).rejects.toMatchObject({
      message: 'Permission denied (os error 13)',
    });
  });

  it('refuses an executable file that is neither a binary nor a #! script, as Codex does, instead of running it with sh', async () => {
    const table = fresh();
    const dir = tempDir();
    const marker = path.join(dir, 'ran');
    // glibc's execvp would hand this to /bin/sh on ENOEXEC, and sh would create the marker.
    writeFileSync(path.join(dir, 'data'), `touch ${marker}\n`, { mode: 0o755 });
    writeFileSync(path.join(dir, 'empty'), '', { mode: 0o755 });
    for (const tty of [false, true]) {
      for (const argv of [[path.join(dir, 'data')], ['data'], [path.join(dir, 'empty')]]) {
        await expect(table.start(request(`noexec-${tty}`, argv, { tty, env: { PATH: dir } }))).rejects.toMatchObject({
          code: 'spawn_failed',
          message: 'Exec format error (os error 8)',
          osCode: 'ENOEXEC',
        });
      }
    }
    expect(readdirSync(dir).sort()).toEqual(['data', 'empty']);
    writeFileSync(path.join(dir, 'script'), '#!/bin/sh\necho script-ran\n', { mode: 0o755 });
    expect((await run(request('script', [path.join(dir, 'script')], { cwd: dir }))).output).toContain('script-ran');
  });

  it("searches the child env's PATH, skipping non-executables, and the server's PATH when the child has none", async () => {
    const first = tempDir();
    const second = tempDir();
    writeFileSync(path.join(first, 'tool'), '#!/bin/sh\necho first\n');
    writeFileSync(path.join(second, 'tool'), '#!/bin/sh\necho second\n');
    chmodSync(path.join(second, 'tool'), 0o755);
    fresh();
    expect((await run(request('p1', ['tool'], { env: { PATH: `${first}:${second}` } }))).output).toBe('second\n');
    // No PATH in the child env: the server's PATH finds `env`, and the child still gets no PATH.
    expect((await run(request('p2', ['env'], { env: {} }))).output).toBe('');
  });

  it('resolves a relative path against the cwd', async () => {
    const dir = tempDir();
    mkdirSync(path.join(dir, 'bin'));
    writeFileSync(path.join(dir, 'bin', 'hello'), '#!/bin/sh\necho "hello from $PWD"\n');
    chmodSync(path.join(dir, 'bin', 'hello'), 0o755);
    fresh();
    expect((await run(request('rel', ['./bin/hello'], { cwd: dir }))).output).toBe(`hello from ${dir}\n`);
  });
});

describe('cwd', () => {
  it('runs in the given directory', async () => {
    const dir = tempDir();
    fresh();
    expect((await run(request('pwd', ['pwd'], { cwd: dir }))).output).toBe(`${dir}\n`);
  });

  it('fails to spawn in a missing directory or a file; rejects a relative path', async () => {
    const table = fresh();
    const dir = tempDir();
    const file = path.join(dir, 'file');
    writeFileSync(file, '');
    // Codex reports these as spawn failures (-32603 on the wire) with the bare OS text.
    await expect(table.start(request('bad', ['true'], { cwd: path.join(dir, 'nope') }))).rejects.toMatchObject({
      code: 'spawn_failed',
      message: 'No such file or directory (os error 2)',
      osCode: 'ENOENT',
    });
    await expect(table.start(request('bad', ['true'], { cwd: file }))).rejects.toMatchObject({
      code: 'spawn_failed',
      message: 'Not a directory (os error 20)',
      osCode: 'ENOTDIR',
    });
    await expect(table.start(request('bad', ['true'], { cwd: 'relative/dir' }))).rejects.toMatchObject({
      code: 'invalid_argument',
      message: 'cwd `relative/dir` must be an absolute path',
    });
    expect(table.list()).toEqual([]);
  });
});

describe('environment', () => {
  it('gives a pipe child exactly the env it was given', async () => {
    fresh();
    expect((await run(request('empty', ['/usr/bin/env'], { env: {} }))).output).toBe('');
    const env = { A: '1', 'WITH SPACE': 'x y', PATH: CHILD_PATH };
    const output = (await run(request('some', ['/usr/bin/env'], { env }))).output;
    expect(output.trim().split('\n').sort()).toEqual(['A=1', 'PATH=/usr/local/bin:/usr/bin:/bin', 'WITH SPACE=x y']);
  });

  it('gives a tty child the env plus SHELL (the login shell) when absent, as portable-pty does', async () => {
    const dir = tempDir();
    fresh();
    const lines = async (id: string, env: Record<string, string>) =>
      (await run(request(id, ['/usr/bin/env'], { env, tty: true, cwd: dir }))).output.trim().split('\r\n').sort();
    expect(await lines('tty-env', { A: '1' })).toEqual(['A=1', `SHELL=${userInfo().shell}`]);
    expect(await lines('tty-own', { TERM: 'dumb', PWD: '/given', SHELL: '/bin/zsh', PERL_BADLANG: '1' })).toEqual([
      'PERL_BADLANG=1',
      'PWD=/given',
      'SHELL=/bin/zsh',
      'TERM=dumb',
    ]);
  });

  it('rejects NUL bytes and bad names before spawning', async () => {
    const table = fresh();
    await expect(table.start(request('nul', ['echo', 'a\0b']))).rejects.toMatchObject({ code: 'invalid_argument' });
    await expect(table.start(request('nul', ['true'], { env: { 'A=B': 'x' } }))).rejects.toMatchObject({
      code: 'invalid_argument',
    });
    expect(table.list()).toEqual([]);
  });
});

describe('arg0', () => {
  const script = 'printf "%s|" "$0"; tr "\\0" " " < /proc/$$/cmdline';

  it('sets the visible argv[0] of a pipe child', async () => {
    fresh();
    const { output } = await run(sh('arg0-pipe', script, { arg0: 'my-shell' }));
    expect(output).toBe(`my-shell|my-shell -c ${script} `);
  });

  it('sets the visible argv[0] of a tty child', async () => {
    fresh();
    const { output } = await run(sh('arg0-tty', script, { arg0: 'my-tty-shell', tty: true }));
    expect(output).toBe(`my-tty-shell|my-tty-shell -c ${script} `);
  });

  it('keeps the bare name as argv[0] by default, for pipes and ttys', async () => {
    fresh();
    const args = ['-c', 'printf "%s|" "$0"'];
    expect((await run(request('bare-pipe', ['sh', ...args]))).output).toBe('sh|');
    expect((await run(request('bare-tty', ['sh', ...args], { tty: true }))).output).toBe('sh|');
    expect((await run(request('path-tty', ['/bin/sh', ...args], { tty: true }))).output).toBe('/bin/sh|');
  });
});

describe('pty', () => {
  it('starts at 24x80 by default, or at the given size, and resizes', async () => {
    const table = fresh();
    expect((await run(request('default-size', ['stty', 'size'], { tty: true }))).output).toBe('24 80\r\n');
    await table.start(sh('sized', 'stty size; read line; stty size', { tty: true, size: { rows: 30, cols: 100 } }));
    await readUntil(table, 'sized', '30 100\r\n');
    table.resize('sized', 40, 120);
    await table.write('sized', Buffer.from('\n'), 'go');
    const { output } = await collectUntilClosed(table, 'sized');
    expect(output).toBe('30 100\r\n\r\n40 120\r\n');
  });

  it('rejects resize of a pipe process and bad sizes', async () => {
    const table = fresh();
    await table.start(request('pipe', ['sleep', '1000']));
    expect(() => table.resize('pipe', 10, 10)).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    await table.start(request('tty', ['sleep', '1000'], { tty: true }));
    expect(() => table.resize('tty', 0, 10)).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    expect(() => table.resize('nope', 10, 10)).toThrow(expect.objectContaining({ code: 'unknown_process' }));
    await expect(
      table.start(request('bad-size', ['true'], { tty: true, size: { rows: 1.5, cols: 80 } })),
    ).rejects.toMatchObject({ code: 'invalid_argument' });
  });

  it('reports exit codes: normal exit, and 1 for a signal death (portable-pty)', async () => {
    const table = fresh();
    expect((await run(sh('code', 'exit 3', { tty: true }))).exitCode).toBe(3);
    await table.start(request('killed', ['sleep', '1000'], { tty: true }));
    table.signal('killed', 'terminate');
    expect((await collectUntilClosed(table, 'killed')).exitCode).toBe(1);
  });

  it('a signal sent the moment a tty child starts still reaches it (before its setsid there is no group)', async () => {
    // node-pty returns right after the fork; signalled at once, the child may not lead its group yet.
    for (let attempt = 0; attempt < 20; attempt++) {
      let code: number | null = null;
      const child = await spawnProcess(
        {
          argv: ['sleep', '1000'],
          cwd: '/',
          env: { PATH: CHILD_PATH },
          tty: true,
          pipeStdin: false,
          serverPath: undefined,
        },
        { output: () => {}, streamEnd: () => {}, exit: (exitCode) => (code = exitCode) },
      );
      child.signalGroup('SIGTERM');
      const died = await Promise.race([
        child.exited.then(() => true),
        new Promise<false>((resolve) => setTimeout(resolve, 5_000, false)),
      ]);
      if (!died) child.kill();
      await child.exited;
      expect({ attempt, died, code }).toEqual({ attempt, died: true, code: 1 });
    }
  });

  it('takes writes larger than the terminal input buffer (EAGAIN retries) completely', async () => {
    const table = fresh();
    await table.start(sh('big-input', 'stty -icanon -echo; echo ready; head -c 200000 | wc -c', { tty: true }));
    await readUntil(table, 'big-input', 'ready');
    expect(await table.write('big-input', Buffer.alloc(200_000, 120), 'big')).toBe('accepted');
    const { output, exitCode } = await collectUntilClosed(table, 'big-input');
    expect(output.trim().split('\r\n').at(-1)?.trim()).toBe('200000');
    expect(exitCode).toBe(0);
  });

  it('delivers large output from a tty completely', async () => {
    fresh();
    const { output } = await run(sh('bulk', 'head -c 300000 /dev/zero | tr "\\0" a', { tty: true }));
    expect(output).toBe('a'.repeat(300_000));
  });
});

describe('pipes', () => {
  it('reports 128 + signal for a signal death and keeps stdout and stderr apart', async () => {
    const table = fresh();
    await table.start(sh('streams', 'echo out; echo err >&2'));
    await collectUntilClosed(table, 'streams');
    const { chunks } = await table.read('streams');
    expect(chunks.map((chunk) => [chunk.stream, chunk.chunk.toString()]).sort()).toEqual([
      ['stderr', 'err\n'],
      ['stdout', 'out\n'],
    ]);
    await table.start(request('killed', ['sleep', '1000']));
    table.signal('killed', 'kill');
    expect((await collectUntilClosed(table, 'killed')).exitCode).toBe(137);
    await table.start(request('interrupted', ['sleep', '1000']));
    table.signal('interrupted', 'interrupt');
    expect((await collectUntilClosed(table, 'interrupted')).exitCode).toBe(130);
  });

  it('delivers large output completely and in order', async () => {
    // Retention larger than the output, so a slow reader cannot lose the oldest chunks.
    const table = new ProcessTable({ retainedOutputBytes: 8 * 1024 * 1024 });
    processes = table;
    await table.start(sh('bulk', 'head -c 4000000 /dev/zero | tr "\\0" b'));
    const { output } = await collectUntilClosed(table, 'bulk');
    expect(output.length).toBe(4_000_000);
    expect(output).toBe('b'.repeat(4_000_000));
  });
});

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
    const table = processes!;
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
      // the paused stream kept (a socketpair lets the writer get ~200 KiB further), plus a few bytes /proc
      // counts from before the exec (libuv's forked child writes one), plus one of head's 8 KiB writes: libuv
      // reads a readable pipe several times in one turn, so the read the pause caught may be followed by a
      // short one (a CI run under load counted 139265 = 128 KiB + 8 KiB + 1). A socketpair would be far above.
      expect(bytes.stdout).toBe(0);
      expect(written).toBeLessThanOrEqual(136 * 1024 + 64);
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
