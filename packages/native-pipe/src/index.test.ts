import { spawnSync } from 'node:child_process';
import {
  closeSync,
  fstatSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { loadNativePipe, nativePipeUnavailableReason } from './index.js';

const FIXTURE = fileURLToPath(new URL('./__fixtures__/process-calls.ts', import.meta.url));
const O_ACCMODE = 0o3;
const O_WRONLY = 0o1;
const O_NONBLOCK = 0o4000;
const O_CLOEXEC = 0o2000000;

// CI builds the addon (TETHER_NATIVE_PIPE=require in .ci/run): not having it is a failure, not a skip.
const native = loadNativePipe();

const opened: number[] = [];
afterEach(() => {
  for (const fd of opened.splice(0)) {
    try {
      closeSync(fd);
    } catch {
      // closed by the test
    }
  }
});

function pipe(): [number, number] {
  const fds = native!.pipe();
  opened.push(...fds);
  return fds;
}

/** The open flags of one of our fds, as Linux shows them (octal) in /proc/self/fdinfo. */
function flagsOf(fd: number): number {
  const line = readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('flags:'));
  return Number.parseInt(line!.slice('flags:'.length).trim(), 8);
}

describe('native pipe', () => {
  it('is built and loads', () => {
    expect(nativePipeUnavailableReason()).toBeNull();
    expect(native).not.toBeNull();
  });

  it('makes a FIFO: bytes written to the write end are read from the read end, then EOF', () => {
    const [readFd, writeFd] = pipe();
    expect(readFd).not.toBe(writeFd);
    expect(fstatSync(readFd).isFIFO()).toBe(true);
    expect(fstatSync(writeFd).ino).toBe(fstatSync(readFd).ino);
    expect(writeSync(writeFd, 'through the pipe')).toBe(16);
    closeSync(writeFd);
    const buffer = Buffer.alloc(64);
    expect(buffer.toString('utf8', 0, readSync(readFd, buffer))).toBe('through the pipe');
    expect(readSync(readFd, buffer)).toBe(0);
  });

  it('opens both ends close-on-exec and blocking, read-only and write-only', () => {
    const [readFd, writeFd] = pipe();
    for (const fd of [readFd, writeFd]) {
      expect(flagsOf(fd) & O_CLOEXEC).toBe(O_CLOEXEC);
      expect(flagsOf(fd) & O_NONBLOCK).toBe(0);
    }
    expect(flagsOf(readFd) & O_ACCMODE).toBe(0);
    expect(flagsOf(writeFd) & O_ACCMODE).toBe(O_WRONLY);
  });

  it('is not inherited by a child', () => {
    const [readFd] = pipe();
    const inode = fstatSync(readFd).ino;
    const listFds = (stdio: Array<'pipe' | number>) =>
      spawnSync('/bin/sh', ['-c', 'ls -l /proc/$$/fd'], { encoding: 'utf8', stdio });
    // The control: handed over on purpose (as fd 3), the pipe shows in the child's listing by its inode.
    // The child's own stdio may be pipes or sockets, depending on the runner, so only our inode counts.
    const handed = listFds(['pipe', 'pipe', 'pipe', readFd]);
    expect(handed.status).toBe(0);
    expect(handed.stdout).toContain(`pipe:[${inode}]`);
    const inherited = listFds(['pipe', 'pipe', 'pipe']);
    expect(inherited.status).toBe(0);
    expect(inherited.stdout).not.toContain(`pipe:[${inode}]`);
  });

  it('throws an errno error when the process is out of fds', () => {
    // A child with a low fd limit makes pipes until it cannot; it runs this module from source through tsx.
    const script = [
      "const { loadNativePipe } = await import('./src/index.ts');",
      'const native = loadNativePipe();',
      'try { for (;;) native.pipe(); } catch (err) {',
      '  console.log(JSON.stringify({ message: err.message, code: err.code, errno: err.errno, syscall: err.syscall }));',
      '}',
    ].join('\n');
    const result = spawnSync(
      '/bin/sh',
      ['-c', 'ulimit -n 64 && exec "$0" --import tsx --input-type=module -e "$1"', process.execPath, script],
      { cwd: new URL('..', import.meta.url).pathname, encoding: 'utf8' },
    );
    expect(result.stderr).toBe('');
    expect(JSON.parse(result.stdout)).toEqual({
      message: 'EMFILE: too many open files, pipe2',
      code: 'EMFILE',
      errno: -24,
      syscall: 'pipe2',
    });
  });

  it('is switched off by TETHER_NATIVE_PIPE=off', async () => {
    vi.resetModules();
    vi.stubEnv('TETHER_NATIVE_PIPE', 'off');
    try {
      const fresh = await import('./index.js');
      expect(fresh.loadNativePipe()).toBeNull();
      expect(fresh.nativePipeUnavailableReason()).toBe('TETHER_NATIVE_PIPE=off');
    } finally {
      vi.unstubAllEnvs();
    }
  });
});

/**
 * Runs the fixture in its own node (execve replaces the caller; the prctl flags are per process) and
 * returns its first JSON line and the rest of its stdout. The child has fd 20 open and not close-on-exec,
 * which nobody asks to keep (Node marks its lowest inherited fds close-on-exec, not that one).
 */
function runFixture(mode: string, wrapper: string[] = []) {
  const leak = openSync('/dev/null', 'r');
  opened.push(leak);
  const command = [...wrapper, process.execPath, '--import', 'tsx', FIXTURE, mode];
  const result = spawnSync(command[0]!, command.slice(1), {
    cwd: new URL('..', import.meta.url).pathname,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe', ...Array<'ignore'>(17).fill('ignore'), leak],
  });
  expect(result.stderr).toBe('');
  const [first, ...rest] = result.stdout.split('\n');
  return { pid: result.pid, report: JSON.parse(first!) as Record<string, unknown>, rest, status: result.status };
}

/** SIGPIPE's bit in a /proc/<pid>/status signal mask. */
const SIGPIPE_BIT = 1n << 12n;

describe('execve', () => {
  it('replaces the process with exactly the given argv and env, keeping only 0-2 and the fds cleared for it', () => {
    const { pid, report, rest, status } = runFixture('exec');
    expect(status).toBe(0);
    const lines = rest.filter((line) => line !== '');
    const values = (prefix: string) => lines.filter((l) => l.startsWith(prefix)).map((l) => l.slice(prefix.length));
    // The same process: execve, not a child.
    expect(report.pid).toBe(pid);
    expect(values('pid ')).toEqual([String(pid)]);
    // /proc/<pid>/cmdline, one line per line of it: argv[0] as given, the (multi-line) script, the rest.
    const args = values('arg ');
    expect(args.slice(0, 2)).toEqual(['tether-sh', '-c']);
    expect(args.slice(-2)).toEqual(['one', 'two words']);
    // Only the given variables (sh adds its own PWD, which it sets in every shell).
    expect(values('env ').filter((v) => !v.startsWith('PWD='))).toEqual(['EMPTY=', 'ONLY=this']);
    // 0-2, and the pipe end given to clearCloexec; not the leaked fd 20 (open until the exec) nor the read end.
    expect(report.leakOpen).toBe(true);
    const fds = lines.filter((line) => /^\d+$/.test(line)).map(Number);
    expect(fds.sort((a, b) => a - b)).toEqual([0, 1, 2, report.kept]);
    // A child_process child's signal state: Node ignores SIGPIPE, the new program does not; nothing blocked.
    expect(BigInt(`0x${values('SigIgn:\t')[0]}`) & SIGPIPE_BIT).toBe(0n);
    expect(values('SigBlk:\t')).toEqual(['0000000000000000']);
  });

  it('refuses NUL in any string and bad env names with a TypeError, and a failed exec leaves the process as it was', () => {
    const { report, status } = runFixture('refused');
    expect(status).toBe(0);
    for (const key of ['nulInArg', 'nulInFile', 'nulInValue', 'nameWithEquals', 'noArgv', 'notString']) {
      expect(report[key], key).toMatchObject({ name: 'TypeError' });
    }
    expect(report.nulInArg).toMatchObject({ message: "execve's argv must not contain NUL bytes" });
    expect(report.nulInFile).toMatchObject({ message: "execve's file must not contain NUL bytes" });
    expect(report.nulInValue).toMatchObject({ message: "execve's env must not contain NUL bytes" });
    expect(report.missing).toEqual({
      name: 'Error',
      message: "ENOENT: no such file or directory, execve '/no/such/program'",
      code: 'ENOENT',
      syscall: 'execve',
    });
    // Undone after the failure: the fds it marked, the signals it reset.
    expect(report).toMatchObject({ keptStaysOpen: true, leakNotMarked: true, readStaysCloseOnExec: true });
    expect(BigInt(`0x${report.ignoredSignals}`) & SIGPIPE_BIT).toBe(SIGPIPE_BIT);
    expect(report.badFd).toMatchObject({ code: 'EBADF', syscall: 'fcntl' });
  });
});

describe('setCloexec', () => {
  it('makes an fd close-on-exec, as clearCloexec unmakes it; a closed fd is an errno error', () => {
    const [readFd] = pipe();
    native!.clearCloexec(readFd);
    expect(flagsOf(readFd) & O_CLOEXEC).toBe(0);
    native!.setCloexec(readFd);
    expect(flagsOf(readFd) & O_CLOEXEC).toBe(O_CLOEXEC);
    closeSync(readFd);
    expect(() => native!.setCloexec(readFd)).toThrow(expect.objectContaining({ code: 'EBADF' }));
    expect(() => native!.setCloexec(-1)).toThrow(TypeError);
  });
});

describe('setCloexecAbove', () => {
  it('makes every fd above the given one close-on-exec, so that a child no longer inherits it; 0-2 stay as they were', () => {
    const { report, status } = runFixture('cloexec');
    expect(status).toBe(0);
    // fd 20 was inherited open (a launcher's leak) and reached the child shell.
    expect(report.before).toMatchObject({ leak: false });
    expect((report.before as { child: number[] }).child).toContain(20);
    expect(report.changed).toBeGreaterThanOrEqual(1);
    // Nothing lacks it any more; the child has only its stdio.
    expect(report.again).toBe(0);
    expect(report.after).toEqual({
      child: [0, 1, 2],
      leak: true,
      stdio: (report.before as { stdio: boolean[] }).stdio,
    });
    expect(report.badArg).toMatchObject({ name: 'TypeError' });
  });
});

describe('growPipe', () => {
  it('raises a pipe to at least the size asked, from either end, never lowers it, and keeps what it holds', () => {
    const [readFd, writeFd] = pipe();
    expect(native!.growPipe(readFd, 0)).toBe(64 * 1024);
    expect(writeSync(writeFd, 'held while it grows')).toBe(19);
    // The kernel rounds up to a power-of-two number of pages.
    expect(native!.growPipe(writeFd, 100_000)).toBe(128 * 1024);
    expect(native!.growPipe(readFd, 1024 * 1024)).toBe(1024 * 1024);
    expect(native!.growPipe(writeFd, 4096)).toBe(1024 * 1024);
    const buffer = Buffer.alloc(64);
    expect(buffer.toString('utf8', 0, readSync(readFd, buffer))).toBe('held while it grows');
  });

  it('answers 0 for what is not a pipe, an errno error for a closed fd, a TypeError for bad arguments', () => {
    const file = openSync('/dev/null', 'r');
    opened.push(file);
    expect(native!.growPipe(file, 1024 * 1024)).toBe(0);
    const [readFd] = pipe();
    closeSync(readFd);
    expect(() => native!.growPipe(readFd, 1024 * 1024)).toThrow(expect.objectContaining({ code: 'EBADF' }));
    expect(() => native!.growPipe(-1, 1)).toThrow(TypeError);
    expect(() => native!.growPipe(0, 2 ** 31)).toThrow(TypeError);
    expect(() => native!.growPipe(0, 1.5)).toThrow(TypeError);
  });

  it('past the system limit, without the privilege for it, keeps the capacity it had and raises nothing', () => {
    // Run without CAP_SYS_RESOURCE (root's way past pipe-max-size) by setpriv; a non-root test is so already.
    const asRoot = process.getuid?.() === 0;
    const { report, status } = runFixture('grow-over-max', asRoot ? ['setpriv', '--bounding-set=-sys_resource'] : []);
    expect(status).toBe(0);
    expect(report).toEqual({ before: 64 * 1024, after: 64 * 1024, again: 64 * 1024, written: 12 });
  });
});

describe('descriptor passing', () => {
  function socketPair(): [number, number] {
    const fds = native!.socketPair();
    opened.push(...fds);
    return fds;
  }

  it('socketPair makes a connected pair of sockets, both close-on-exec and blocking', () => {
    const [a, b] = socketPair();
    for (const fd of [a, b]) {
      expect(fstatSync(fd).isSocket()).toBe(true);
      expect(flagsOf(fd) & O_CLOEXEC).toBe(O_CLOEXEC);
      expect(flagsOf(fd) & O_NONBLOCK).toBe(0);
    }
  });

  it('sendFd hands over the open file itself: the received descriptor is close-on-exec and shares its offset', () => {
    const [a, b] = socketPair();
    const path = join(mkdtempSync(join(tmpdir(), 'native-pipe-')), 'passed');
    writeFileSync(path, 'abcdef');
    const file = openSync(path, 'r');
    opened.push(file);
    expect(native!.receiveFd(b)).toBeNull(); // nothing sent yet: it does not block
    native!.sendFd(a, file);
    const received = native!.receiveFd(b)!;
    opened.push(received);
    expect(received).not.toBe(file);
    expect(flagsOf(received) & O_CLOEXEC).toBe(O_CLOEXEC);
    expect(fstatSync(received).ino).toBe(fstatSync(file).ino);
    // One open file, two descriptors: a read through one moves the offset of the other.
    const buffer = Buffer.alloc(3);
    readSync(file, buffer);
    expect(readSync(received, buffer)).toBe(3);
    expect(buffer.toString()).toBe('def');
    rmSync(dirname(path), { recursive: true });
  });

  it('receiveFd answers null when the peer closed without sending; errno errors and TypeErrors otherwise', () => {
    const [a, b] = socketPair();
    closeSync(a);
    expect(native!.receiveFd(b)).toBeNull();
    const [c] = socketPair();
    closeSync(c);
    expect(() => native!.receiveFd(c)).toThrow(expect.objectContaining({ code: 'EBADF', syscall: 'recvmsg' }));
    const file = openSync('/dev/null', 'r');
    opened.push(file);
    expect(() => native!.sendFd(b, file)).toThrow(expect.objectContaining({ code: 'EPIPE', syscall: 'sendmsg' }));
    expect(() => native!.sendFd(-1, file)).toThrow(TypeError);
    expect(() => native!.receiveFd(1.5)).toThrow(TypeError);
  });
});

describe('unix sockets by path (a warm process and its commands)', () => {
  it('listenUnix, connectUnix and acceptUnix make blocking, close-on-exec sockets; peerUid names the user', () => {
    const dir = mkdtempSync(join(tmpdir(), 'native-unix-'));
    const path = join(dir, 'listen.sock');
    const listener = native!.listenUnix(path);
    const [watchRead, watchWrite] = pipe();
    opened.push(listener);
    expect(statSync(path).isSocket()).toBe(true);
    const client = native!.connectUnix(path);
    opened.push(client);
    const server = native!.acceptUnix(listener, watchRead)!;
    opened.push(server);
    for (const fd of [listener, client, server]) {
      expect(flagsOf(fd) & O_CLOEXEC).toBe(O_CLOEXEC);
      expect(flagsOf(fd) & O_NONBLOCK).toBe(0);
    }
    expect(native!.peerUid(server)).toBe(process.getuid!());
    expect(native!.peerUid(client)).toBe(process.getuid!());
    expect(native!.waitReadable(server, 0)).toBe(false);
    writeSync(client, 'x');
    expect(native!.waitReadable(server, 1000)).toBe(true);
    // A byte on the watched pipe ends the wait, with no connection pending.
    writeSync(watchWrite, 'x');
    expect(native!.acceptUnix(listener, watchRead)).toBeNull();
    closeSync(client);
    expect(native!.waitReadable(server, 1000)).toBe(true); // the byte, then the hang-up
    rmSync(dir, { recursive: true });
  });

  it('connectUnix names a socket nobody listens on, a missing path and a bad argument', () => {
    const dir = mkdtempSync(join(tmpdir(), 'native-unix-'));
    const stale = join(dir, 'stale.sock');
    closeSync(native!.listenUnix(stale));
    expect(() => native!.connectUnix(stale)).toThrow(
      expect.objectContaining({ code: 'ECONNREFUSED', syscall: 'connect' }),
    );
    expect(() => native!.connectUnix(join(dir, 'none.sock'))).toThrow(expect.objectContaining({ code: 'ENOENT' }));
    expect(() => native!.listenUnix(stale)).toThrow(expect.objectContaining({ code: 'EADDRINUSE', syscall: 'bind' }));
    expect(() => native!.connectUnix(`${dir}/${'x'.repeat(120)}`)).toThrow(TypeError);
    expect(() => native!.connectUnix(`${dir}/a\0b`)).toThrow(TypeError);
    expect(() => native!.waitReadable(0, -1)).toThrow(TypeError);
    rmSync(dir, { recursive: true });
  });

  it('dup2 puts a descriptor of the same open file at a number, without close-on-exec', () => {
    const [readFd] = pipe();
    const [, spare] = pipe();
    native!.dup2(readFd, spare);
    expect(fstatSync(spare).ino).toBe(fstatSync(readFd).ino);
    expect(flagsOf(spare) & O_CLOEXEC).toBe(0);
    expect(() => native!.dup2(1_000_000, spare)).toThrow(expect.objectContaining({ code: 'EBADF', syscall: 'dup2' }));
  });

  it('exitNow ends the process with its status, without running exit listeners', () => {
    const result = spawnSync(process.execPath, ['--import', 'tsx', FIXTURE, 'exit-now'], {
      cwd: new URL('..', import.meta.url).pathname,
      encoding: 'utf8',
    });
    expect([result.status, result.stdout, result.stderr]).toEqual([7, 'before\n', '']);
    expect(() => native!.exitNow(256)).toThrow(TypeError);
  });
});

describe('peerPid and originalDestination', () => {
  it('peerPid names the maker of the peer: this process for its own pair, the child for a pair it made and sent', () => {
    const [a, b] = native!.socketPair();
    opened.push(a, b);
    expect(native!.peerPid(a)).toBe(process.pid);
    expect(native!.peerPid(b)).toBe(process.pid);
    const result = spawnSync(process.execPath, ['--import', 'tsx', FIXTURE, 'send-pair'], {
      cwd: new URL('..', import.meta.url).pathname,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe', b],
    });
    expect(result.stderr).toBe('');
    const report = JSON.parse(result.stdout) as { pid: number; mine: number };
    expect(report).toEqual({ pid: result.pid, mine: result.pid });
    const received = native!.receiveFd(a)!;
    opened.push(received);
    expect(native!.peerPid(received)).toBe(result.pid);
    const [readFd] = pipe();
    expect(() => native!.peerPid(readFd)).toThrow(expect.objectContaining({ code: 'ENOTSOCK', syscall: 'getsockopt' }));
    expect(() => native!.peerPid(-1)).toThrow(TypeError);
  });

  it('originalDestination reads where a NAT-redirected connection was headed, IPv4 and IPv6', () => {
    // The redirect needs namespaces of its own (unshare, nft and ip on the host, as transparent TCP does).
    const { report, status } = runFixture('original-destination', ['unshare', '--user', '--map-root-user', '--net']);
    expect(status).toBe(0);
    expect(report).toEqual({
      seen: [
        { address: '203.0.113.7', port: 80 },
        { address: '2001:db8::7', port: 443 },
        // Not redirected: its own destination.
        { address: '127.0.0.1', port: 1080 },
      ],
      socketPair: expect.objectContaining({ code: 'EAFNOSUPPORT', syscall: 'getsockopt' }),
    });
    expect(() => native!.originalDestination(-1)).toThrow(TypeError);
  });
});

describe('prctl', () => {
  it('setChildSubreaper makes orphaned descendants children of this process, which reapChild reaps; false turns it off', () => {
    const { pid, report } = runFixture('subreaper');
    expect(report).toEqual({
      pid,
      before: false,
      set: true,
      after: true,
      // The shell's background sleep, orphaned when the shell exited, was reparented here, not to init.
      parent: pid,
      runningReaped: false,
      goneAfterReap: 'ENOENT',
      notOurs: 'ECHILD',
      unset: false,
      afterUnset: false,
    });
  });

  it('setDumpable clears and restores the dumpable flag', () => {
    const { report } = runFixture('dumpable');
    expect(report).toMatchObject({ before: true, cleared: false, restored: true, badArg: { name: 'TypeError' } });
  });
});
