/**
 * Connection reuse through the real product path: `harness master start` (a detached process holding
 * channels set up through the registry bin, the relay bin and `executor --remote`), then harness commands
 * that take a channel over its unix socket. Also: the socket's permissions, a stale socket, a master that is
 * not trusted, a session that outlives its master (resumed directly), the executor key pin, TETHER_REUSE=auto
 * and the idle timeout. Nothing may be left running: every master started here is gone at the end.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadNativePipe, nativePipeUnavailableReason } from '@tether/native-pipe';
import { generateIdentity, publicKeyToJson } from '@tether/noise';
import { isAlive, repoRoot, type Stack, startStack } from '@tether/test-kit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

const ENVIRONMENT = 'env-reuse-e2e';
const MAIN = join(repoRoot(), 'apps', 'harness', 'dist', 'main.js');

interface Run {
  code: number | null;
  stdout: Buffer;
  stderr: string;
}

function harness(
  args: string[],
  env: NodeJS.ProcessEnv,
  stdin?: Buffer,
  options: { cwd?: string; onSpawn?: (child: ReturnType<typeof spawn>) => void } = {},
): Promise<Run> {
  const child = spawn(process.execPath, [MAIN, ...args], {
    env: { ...process.env, ...env },
    stdio: [stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
    ...(options.cwd ? { cwd: options.cwd } : {}),
  });
  options.onSpawn?.(child);
  const out: Buffer[] = [];
  let stderr = '';
  child.stdout?.on('data', (d: Buffer) => out.push(d));
  child.stderr?.on('data', (d: Buffer) => {
    stderr += d;
  });
  if (stdin) child.stdin?.end(stdin);
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout: Buffer.concat(out), stderr }));
  });
}

async function waitFor(what: string, check: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> {
  const until = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('harness connection master (reuse) through registry, relay and executor', () => {
  let stack: Stack;
  let dir: string;
  let runtime: string;
  let env: NodeJS.ProcessEnv;
  /** Every master pid seen, killed at the end if a test left one. */
  const pids = new Set<number>();

  const tetherDir = () => join(runtime, 'tether');
  const logText = () =>
    (existsSync(tetherDir()) ? readdirSync(tetherDir()) : [])
      .filter((name) => name.endsWith('.log'))
      .map((name) => readFileSync(join(tetherDir(), name), 'utf8'))
      .join('');
  const handouts = () => (logText().match(/channel handed out/g) ?? []).length;

  async function statusPid(extra: NodeJS.ProcessEnv = {}): Promise<number | null> {
    const run = await harness(['master', 'status'], { ...env, ...extra });
    const pid = /master pid (\d+)/.exec(run.stdout.toString())?.[1];
    if (!pid) return null;
    pids.add(Number(pid));
    return Number(pid);
  }

  async function startMaster(args: string[] = []): Promise<{ socket: string; pid: number }> {
    const run = await harness(['master', 'start', ...args], env);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const socket = run.stdout.toString().trim();
    const pid = await statusPid();
    expect(pid).not.toBeNull();
    return { socket, pid: pid as number };
  }

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tether-reuse-e2e-'));
    runtime = join(dir, 'run');
    mkdirSync(runtime, { mode: 0o700 });
    stack = await startStack();
    await stack.startExecutor('tether', ENVIRONMENT);
    env = {
      TETHER_HARNESS_REGISTRY: stack.registryUrl,
      TETHER_HARNESS_API_KEY: stack.keys.harness,
      TETHER_HARNESS_ENVIRONMENT_ID: ENVIRONMENT,
      XDG_RUNTIME_DIR: runtime,
      TETHER_REUSE: '',
    };
  });

  afterEach(async () => {
    await harness(['master', 'stop'], env);
    for (const pid of pids) await waitFor(`master ${pid} to exit`, () => !isAlive(pid));
    if (existsSync(tetherDir())) {
      chmodSync(tetherDir(), 0o700);
      expect(readdirSync(tetherDir()).filter((name) => name.endsWith('.sock'))).toEqual([]);
      rmSync(tetherDir(), { recursive: true, force: true });
    }
  });

  afterAll(async () => {
    for (const pid of pids) if (isAlive(pid)) process.kill(pid, 'SIGKILL');
    await stack?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('serves commands over a private socket, passes bytes and exit codes, and stops', {
    timeout: 120_000,
  }, async () => {
    // The master's own channels: with a warm process, its commands would run over the warm process's (below).
    const { socket, pid } = await startMaster(['--no-warm']);
    expect(socket.startsWith(`${tetherDir()}/`)).toBe(true);
    expect(socket).not.toContain(stack.keys.harness);
    expect(statSync(tetherDir()).mode & 0o777).toBe(0o700);
    expect(statSync(socket).mode & 0o777).toBe(0o600);
    expect(statSync(socket).uid).toBe(process.getuid?.());
    expect(logText()).not.toContain(stack.keys.harness);

    const hello = await harness(['exec', '--', 'sh', '-c', 'echo hello; exit 3'], env);
    expect(hello.stdout.toString()).toBe('hello\n');
    expect(hello.code).toBe(3);
    expect(handouts()).toBe(1);

    // Binary attachments both ways (stdin writes and output chunks) spliced unchanged: 3 MiB round trip.
    const data = randomBytes(3 * 1024 * 1024);
    const echo = await harness(['exec', '-i', '--', 'cat'], env, data);
    expect(echo.stderr).toBe('');
    expect(echo.code).toBe(0);
    expect(echo.stdout.equals(data)).toBe(true);
    expect(handouts()).toBe(2);

    // TETHER_REUSE=no connects directly.
    const direct = await harness(['exec', '--', 'true'], { ...env, TETHER_REUSE: 'no' });
    expect(direct.code).toBe(0);
    expect(handouts()).toBe(2);

    const stop = await harness(['master', 'stop'], env);
    expect(stop.code).toBe(0);
    await waitFor('the master to exit', () => !isAlive(pid));
    expect(existsSync(socket)).toBe(false);
    expect((await harness(['master', 'status'], env)).code).toBe(1);
    expect(logText()).not.toContain(stack.keys.harness);
  });

  describe('warm process', () => {
    async function warmPid(): Promise<number | null> {
      const run = await harness(['master', 'status'], env);
      const pid = /warm process pid (\d+)/.exec(run.stdout.toString())?.[1];
      if (pid) pids.add(Number(pid));
      return pid ? Number(pid) : null;
    }
    /** The warm process waiting now, once the master has one ready (after `after`, when given, has gone). */
    async function nextWarm(after: number | null = null): Promise<number> {
      let pid: number | null = null;
      await waitFor('a warm process', async () => {
        pid = await warmPid();
        return (
          pid !== null &&
          pid !== after &&
          existsSync(join(tetherDir(), readdirSync(tetherDir()).find((n) => n.endsWith('.warm.sock')) ?? '-'))
        );
      });
      return pid as unknown as number;
    }

    /** `harness exec -- sh -c SCRIPT`, its own process sent `signal` once the script printed `ready`. */
    async function signalOnceReady(script: string, signal: NodeJS.Signals): Promise<Run> {
      let client: ReturnType<typeof spawn> | null = null;
      let seen = '';
      const run = harness(['exec', '--', 'sh', '-c', script], env, undefined, {
        onSpawn: (child) => {
          client = child;
          child.stdout?.on('data', (d: Buffer) => {
            seen += d;
          });
        },
      });
      await waitFor('the remote command to start', () => seen.includes('ready'));
      (client as unknown as ReturnType<typeof spawn>).kill(signal);
      return run;
    }

    it("runs a command with no terminal in the master's warm process: bytes, stdin, exit status, cwd and umask", {
      timeout: 120_000,
    }, async () => {
      const { pid: masterPid } = await startMaster();
      const first = await nextWarm();
      const warmSocket = readdirSync(tetherDir()).find((name) => name.endsWith('.warm.sock')) as string;
      expect(statSync(join(tetherDir(), warmSocket)).mode & 0o777).toBe(0o600);

      const hello = await harness(['exec', '--', 'sh', '-c', 'echo hello; echo oops >&2; exit 3'], env);
      expect([hello.code, hello.stdout.toString(), hello.stderr]).toEqual([3, 'hello\n', 'oops\n']);
      // The warm process took it (and became the command: gone with it); the master started the next.
      await waitFor('the warm process to end with its command', () => !isAlive(first));
      const second = await nextWarm(first);

      // stdin handed over as a file, and 3 MiB both ways byte for byte.
      const data = randomBytes(3 * 1024 * 1024);
      const input = join(dir, 'warm-input.bin');
      writeFileSync(input, data);
      const child = spawn(process.execPath, [MAIN, 'exec', '-i', '--', 'cat'], {
        env: { ...process.env, ...env },
        stdio: [openSync(input, 'r'), 'pipe', 'pipe'],
      });
      const out: Buffer[] = [];
      child.stdout?.on('data', (d: Buffer) => out.push(d));
      const code = await new Promise((resolve) => child.once('close', resolve));
      expect(code).toBe(0);
      expect(Buffer.concat(out).equals(data)).toBe(true);
      await waitFor('the second warm process to end', () => !isAlive(second));

      // The command's working directory (a relative local path) and umask (the copy's mode).
      const third = await nextWarm(second);
      const work = mkdtempSync(join(dir, 'cwd-'));
      writeFileSync(join(work, 'local.txt'), 'from the cwd\n');
      const copy = await harness(['cp', 'local.txt', `${ENVIRONMENT}:${join(dir, 'remote.txt')}`], env, undefined, {
        cwd: work,
      });
      expect(copy.code).toBe(0);
      expect(copy.stderr).toContain('sha256 verified');
      expect(readFileSync(join(dir, 'remote.txt'), 'utf8')).toBe('from the cwd\n');
      const back = await harness(['cp', `${ENVIRONMENT}:${join(dir, 'remote.txt')}`, 'back.txt'], env, undefined, {
        cwd: work,
      });
      expect(back.code).toBe(0);
      expect(readFileSync(join(work, 'back.txt'), 'utf8')).toBe('from the cwd\n');
      await waitFor('the third warm process to end', () => !isAlive(third));
      expect(isAlive(masterPid)).toBe(true);
    });

    it('runs its command over a channel it set up while waiting, not through the master, which may stop meanwhile', {
      timeout: 120_000,
    }, async () => {
      await startMaster();
      const channelReady = async () =>
        /\(channel ready\)/.test((await harness(['master', 'status'], env)).stdout.toString());
      await waitFor('a warm process with its channel set up', channelReady);
      const bytes = 3 * 1024 * 1024;
      const out = await harness(['exec', '--', 'head', '-c', String(bytes), '/dev/urandom'], env);
      expect([out.code, out.stdout.length, out.stderr]).toEqual([0, bytes, '']);
      // The next warm process sets up a channel of its own too; a command running over it does not need the master.
      await waitFor('the next warm process with its channel set up', channelReady);
      let seen = '';
      const running = harness(['exec', '--', 'sh', '-c', 'echo started; sleep 2; echo survived'], env, undefined, {
        onSpawn: (child) =>
          child.stdout?.on('data', (d: Buffer) => {
            seen += d;
          }),
      });
      await waitFor('the command to start', () => seen.includes('started'));
      expect((await harness(['master', 'stop'], env)).code).toBe(0);
      const run = await running;
      expect([run.code, run.stdout.toString(), run.stderr]).toEqual([0, 'started\nsurvived\n', '']);
      expect(handouts()).toBe(0);
    });

    it('runs a command without a channel of its own when its starter sent no usable spec; its arguments are refused from a command line', {
      timeout: 120_000,
    }, async () => {
      // No master: a warm process started by hand, told nonsense on its fd 3.
      mkdirSync(tetherDir(), { recursive: true, mode: 0o700 });
      chmodSync(tetherDir(), 0o700);
      const socket = join(tetherDir(), 'by-hand.warm.sock');
      const warm = spawn(process.execPath, [MAIN, '__tether-warm-process'], {
        env: { ...process.env, ...env, TETHER_WARM_SOCKET: socket },
        stdio: ['ignore', 'ignore', 'ignore', 'pipe'],
      });
      pids.add(warm.pid as number);
      (warm.stdio[3] as NodeJS.WritableStream).write('not a spec\n');
      await waitFor('the warm process to listen', () => existsSync(socket));
      const run = await harness(['exec', '--', 'sh', '-c', 'echo served by $PPID'], env);
      expect([run.code, run.stderr]).toEqual([0, '']);
      // It ran the command (over a direct connection: there is no master) and ended with it.
      await waitFor('the warm process to end with its command', () => !isAlive(warm.pid as number));
      expect(run.stdout.toString()).toMatch(/^served by \d+\n$/);
      expect(existsSync(socket)).toBe(false);

      const thread = await harness(['__tether-warm-accept'], env);
      expect([thread.code, thread.stderr]).toEqual([
        2,
        "harness: __tether-warm-accept is a warm process's own thread\n",
      ]);
      const alone = await harness(['__tether-warm-process'], env);
      expect([alone.code, alone.stderr]).toEqual([
        2,
        'harness: __tether-warm-process is started by a connection master only\n',
      ]);
    });

    it('exits 141 when its reader goes away, and passes SIGINT on to the remote process', {
      timeout: 120_000,
    }, async () => {
      await startMaster();
      const first = await nextWarm();
      const piped = spawn(
        'bash',
        ['-c', `"${process.execPath}" "${MAIN}" exec -- yes | head -1; echo "\${PIPESTATUS[0]}"`],
        {
          env: { ...process.env, ...env },
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      let text = '';
      piped.stdout?.on('data', (d: Buffer) => {
        text += d;
      });
      await new Promise((resolve) => piped.once('close', resolve));
      expect(text).toBe('y\n141\n');
      await waitFor('the first warm process to end', () => !isAlive(first));

      const second = await nextWarm(first);
      const run = await signalOnceReady(
        'trap "echo interrupted; exit 5" INT; echo ready; while :; do sleep 0.1; done',
        'SIGINT',
      );
      expect([run.code, run.stdout.toString()]).toEqual([5, 'ready\ninterrupted\n']);
      await waitFor('the second warm process to end', () => !isAlive(second));
    });

    it('ends with a command whose own process was killed, and leaves nothing running', {
      timeout: 120_000,
    }, async () => {
      await startMaster();
      const first = await nextWarm();
      await signalOnceReady('echo ready; sleep 30', 'SIGKILL');
      await waitFor('the warm process running it to end', () => !isAlive(first));
      await nextWarm(first);
    });

    it('refuses an offer without descriptors, one too long or one that never comes, and serves the next command', {
      timeout: 120_000,
    }, async () => {
      await startMaster();
      const warm = await nextWarm();
      const native = loadNativePipe();
      expect(native, nativePipeUnavailableReason() ?? '').not.toBeNull();
      const path = join(tetherDir(), readdirSync(tetherDir()).find((name) => name.endsWith('.warm.sock')) as string);
      /** An offer on a fresh connection; resolves once the warm process has closed it. */
      const refused = async (send: (fd: number) => void) => {
        const fd = (native as NonNullable<typeof native>).connectUnix(path);
        send(fd);
        const socket = new Socket({ fd, readable: true, writable: false });
        socket.on('error', () => undefined); // a reset: it closed with our bytes unread
        socket.resume();
        await new Promise((resolve) => socket.once('close', resolve));
      };
      const handOver = (fd: number) => {
        for (const own of [0, 1, 2]) (native as NonNullable<typeof native>).sendFd(fd, own);
      };
      const tooLong = Buffer.alloc(4);
      tooLong.writeUInt32BE(4 * 1024 * 1024 + 1);
      await refused((fd) => writeSync(fd, 'no descriptors\n'));
      await refused((fd) => {
        handOver(fd);
        writeSync(fd, tooLong);
      });
      await refused(handOver); // then nothing: the warm process gives up after its wait
      expect(await warmPid()).toBe(warm);
      const run = await harness(['exec', '--', 'echo', 'still serving'], env);
      expect([run.code, run.stdout.toString()]).toEqual([0, 'still serving\n']);
      await waitFor('the warm process to end with its command', () => !isAlive(warm));
    });

    it('is not used by another Node setup, TETHER_REUSE=no or a master started with --no-warm', {
      timeout: 120_000,
    }, async () => {
      await startMaster();
      const warm = await nextWarm();
      // NODE_OPTIONS differs: the warm process declines and the command runs itself, through the master.
      const other = await harness(['exec', '--', 'echo', 'declined'], { ...env, NODE_OPTIONS: '--no-warnings' });
      expect([other.code, other.stdout.toString(), other.stderr]).toEqual([0, 'declined\n', '']);
      const direct = await harness(['exec', '--', 'echo', 'direct'], { ...env, TETHER_REUSE: 'no' });
      expect([direct.code, direct.stdout.toString()]).toEqual([0, 'direct\n']);
      expect(await warmPid()).toBe(warm);
      expect(handouts()).toBe(1);

      expect((await harness(['master', 'stop'], env)).code).toBe(0);
      await waitFor('the warm process to end with its master', () => !isAlive(warm));
      expect(readdirSync(tetherDir()).filter((name) => name.endsWith('.sock'))).toEqual([]);

      await startMaster(['--no-warm']);
      expect(await warmPid()).toBeNull();
      expect(readdirSync(tetherDir()).filter((name) => name.endsWith('.warm.sock'))).toEqual([]);
      expect((await harness(['exec', '--', 'echo', 'cold'], env)).stdout.toString()).toBe('cold\n');
    });
  });

  it('sets up more channels than the executor lets one harness key handshake', { timeout: 120_000 }, async () => {
    // The executor starts 16 handshakes at once per harness key, one more a second: the pool (8) and three
    // rounds of 8 commands, each round's channels set up again before the next, go well beyond that, so the
    // master's channels must not share one key (else its refills are refused and commands connect directly).
    // No warm process: it would run one command of each round over a channel of its own.
    await startMaster(['--pool', '8', '--no-warm']);
    const ready = async () => /8 channel\(s\) ready/.test((await harness(['master', 'status'], env)).stdout.toString());
    for (let round = 0; round < 3; round++) {
      await waitFor('the pool to be full', ready, 30_000);
      const runs = await Promise.all(
        Array.from({ length: 8 }, (_, i) => harness(['exec', '--', 'sh', '-c', `echo ${i}`], env)),
      );
      expect(runs.map((run) => [run.code, run.stdout.toString(), run.stderr])).toEqual(
        runs.map((_, i) => [0, `${i}\n`, '']),
      );
      expect(handouts()).toBe(8 * (round + 1));
    }
    expect(logText()).not.toContain('set-up failed');
  });

  it('replaces a channel once its command is done while another is ready, at once when none is', {
    timeout: 120_000,
  }, async () => {
    // The master's own channels: a warm process's command would run over the warm process's channel.
    await startMaster(['--pool', '2', '--no-warm']);
    const status = async () => (await harness(['master', 'status'], env)).stdout.toString();
    const running = harness(['exec', '--', 'sh', '-c', 'sleep 3; echo done'], env);
    await waitFor('the command to take a channel', () => handouts() === 1);
    // The set-up of its replacement would have been over long before this.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(await status()).toContain('1 channel(s) ready, 1 in use');
    // The last ready one taken: both are set up again at once, the first command still running.
    const second = harness(['exec', '--', 'sh', '-c', 'sleep 3; echo also'], env);
    await waitFor('two channels ready beside two in use', async () =>
      (await status()).includes('2 channel(s) ready, 2 in use'),
    );
    expect((await running).stdout.toString()).toBe('done\n');
    expect((await second).stdout.toString()).toBe('also\n');
  });

  it('removes a stale socket and connects directly', { timeout: 120_000 }, async () => {
    const { socket, pid } = await startMaster();
    process.kill(pid, 'SIGKILL');
    await waitFor('the master to die', () => !isAlive(pid));
    expect(existsSync(socket)).toBe(true);
    const run = await harness(['exec', '--', 'sh', '-c', 'echo direct'], env);
    expect(run.stdout.toString()).toBe('direct\n');
    expect(run.code).toBe(0);
    expect(existsSync(socket)).toBe(false);
  });

  it('does not use a master whose directory or socket other users can reach', { timeout: 120_000 }, async () => {
    // Its warm process (which runs a command over a channel of its own) is checked the same way, below.
    const { socket } = await startMaster(['--no-warm']);
    chmodSync(socket, 0o666);
    const open = await harness(['exec', '--', 'true'], env);
    expect(open.code).toBe(0);
    chmodSync(socket, 0o600);
    chmodSync(tetherDir(), 0o755);
    const openDir = await harness(['exec', '--', 'true'], env);
    expect(openDir.code).toBe(0);
    expect((await harness(['master', 'status'], env)).stderr).toContain('open to other users');
    expect(handouts()).toBe(0);
    chmodSync(tetherDir(), 0o700);
    expect((await harness(['exec', '--', 'true'], env)).code).toBe(0);
    expect(handouts()).toBe(1);
  });

  it('keeps a session going when its master stops mid-command (resumed directly)', { timeout: 120_000 }, async () => {
    // A channel of the master's: a warm process's command would have its own (tested above).
    const { pid } = await startMaster(['--no-warm']);
    const running = harness(['exec', '--', 'sh', '-c', 'sleep 3; echo survived'], env);
    await waitFor('the command to take a channel', () => handouts() === 1);
    expect((await harness(['master', 'stop'], env)).code).toBe(0);
    await waitFor('the master to exit', () => !isAlive(pid));
    const run = await running;
    expect(run.stderr).toBe('');
    expect(run.stdout.toString()).toBe('survived\n');
    expect(run.code).toBe(0);
  });

  it('checks the executor key pin in the master and in the command', { timeout: 120_000 }, async () => {
    const wrong = join(dir, 'wrong-key.json');
    writeFileSync(wrong, JSON.stringify(publicKeyToJson(generateIdentity().publicKey)));
    const refused = await harness(['master', 'start', '--executor-key', wrong], env);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/not the pinned one/);
    expect(readdirSync(tetherDir()).filter((name) => name.endsWith('.sock'))).toEqual([]);
    // A master without a pin serves; a command pinned to another key refuses its channel.
    await startMaster();
    const pinned = await harness(['exec', '--executor-key', wrong, '--', 'true'], env);
    expect(pinned.code).not.toBe(0);
    expect(pinned.stderr).toMatch(/pinned/);
  });

  it('starts a master on first use with TETHER_REUSE=auto, and one with --persist exits when idle', {
    timeout: 120_000,
  }, async () => {
    const first = await harness(['exec', '--', 'sh', '-c', 'echo auto'], { ...env, TETHER_REUSE: 'auto' });
    expect(first.stdout.toString()).toBe('auto\n');
    expect(first.code).toBe(0);
    expect(handouts()).toBe(1);
    const pid = await statusPid();
    expect(pid).not.toBeNull();
    expect((await harness(['master', 'stop'], env)).code).toBe(0);
    await waitFor('the auto master to exit', () => !isAlive(pid as number));

    const idle = await startMaster(['--persist', '1']);
    await waitFor('the idle master to exit', () => !isAlive(idle.pid));
    expect(existsSync(idle.socket)).toBe(false);
  });

  it('rejects bad TETHER_REUSE values and master flags', { timeout: 60_000 }, async () => {
    const bad = await harness(['exec', '--', 'true'], { ...env, TETHER_REUSE: 'sometimes' });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('TETHER_REUSE must be no, use or auto');
    const pool = await harness(['master', 'start', '--pool', '99'], env);
    expect(pool.code).not.toBe(0);
    expect(pool.stderr).toContain('expected 1 to 8');
  });
});
