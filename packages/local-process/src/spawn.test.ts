import { chmodSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { useFreshTable } from './__tests__/fresh-table.js';
import { CHILD_PATH, collectUntilClosed, readUntil, request, sh } from './__tests__/helpers.js';
import { spawnProcess } from './spawn.js';

const { fresh, run, tempDir } = useFreshTable();

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
    const table = fresh({ retainedOutputBytes: 8 * 1024 * 1024 });
    await table.start(sh('bulk', 'head -c 4000000 /dev/zero | tr "\\0" b'));
    const { output } = await collectUntilClosed(table, 'bulk');
    expect(output.length).toBe(4_000_000);
    expect(output).toBe('b'.repeat(4_000_000));
  });
});
