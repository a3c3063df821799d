import { spawnSync } from 'node:child_process';
import { closeSync, fstatSync, readFileSync, readSync, writeSync } from 'node:fs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { loadNativePipe, nativePipeUnavailableReason } from './index.js';

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
