/**
 * A child on a PTY (node-pty; this is the only module that imports it): started through a perl trampoline
 * that restores Codex's env and argv[0], its input written to the master fd, its last output drained when
 * the socket goes.
 */
import { closeSync, readSync, writeSync } from 'node:fs';
import { userInfo } from 'node:os';
import type { Readable } from 'node:stream';
import { Writable } from 'node:stream';
import { loadNativePipe, nativePipeUnavailableReason } from '@tether/native-pipe';
import { ptyMasterFd, ptySocket } from '@tether/user-read';
import type { IPty } from 'node-pty';
import { ProcessError } from './errors.js';
import { killGroupAndStrays, signalGroup } from './signals.js';
import { checkSize, FALLBACK_PATH, resolveProgram, spawnError } from './spawn-checks.js';
import type { ProcessSink, PtySize, SpawnedProcess, SpawnOptions } from './types.js';

export const DEFAULT_PTY_SIZE: Readonly<PtySize> = { rows: 24, cols: 80 };
/** Longest pause between retries of a PTY input write the kernel refused with EAGAIN (its buffer is ~4 KiB). */
const PTY_WRITE_RETRY_MAX_MS = 10;

type NodePty = typeof import('node-pty');
let nodePty: Promise<NodePty> | undefined;
/** Resolved once, through the server's PATH (perl-base is Essential on Debian). */
let perlPath: string | null | undefined;

/**
 * The PTY trampoline. Arguments: `<d> <s> <d names to delete> <s name/value pairs to set> <program>
 * <argv0> <args…>`. It fixes the environment up, then execs `program` with the visible `argv0`. A fixed
 * script: nothing from the request is interpolated into perl code.
 */
const PTY_TRAMPOLINE = [
  'my ($d, $s) = splice(@ARGV, 0, 2);',
  'delete @ENV{splice(@ARGV, 0, $d)};',
  'my %set = splice(@ARGV, 0, 2 * $s);',
  '@ENV{keys %set} = values %set;',
  'exec {shift @ARGV} @ARGV or die "exec: $!\\n";',
].join(' ');

/**
 * node-pty on first use. It is optional where the executor is installed from its npm package (an optional
 * dependency with a native build, absent where npm could not fetch or build it): pipes work without it,
 * and a terminal is refused saying what is missing.
 */
function loadNodePty(): Promise<NodePty> {
  nodePty ??= import('node-pty').catch((err: unknown) => {
    const reason = (err instanceof Error ? err.message : String(err)).split('\n')[0];
    throw new ProcessError(
      'spawn_failed',
      `a terminal needs node-pty, which cannot be loaded (${reason}); install node-pty where the executor loads its modules (for a global npm install: npm install -g node-pty), or run without a terminal`,
      { cause: err },
    );
  });
  return nodePty;
}

/**
 * node-pty makes the child a session leader with the PTY as controlling terminal, but it always runs
 * argv[0] as the visible name and it forces `PWD=cwd` and `TERM` (the env's, else `xterm`) into the
 * environment. Codex (portable-pty) passes the env as given plus `SHELL` (the server user's login shell)
 * when absent, and keeps the bare argv[0]. So the child goes through a perl trampoline that restores the
 * env and sets the visible argv[0] (`exec {program} argv0, args`). Without perl, node-pty's env and a
 * resolved argv[0] remain, and an explicit `arg0` fails.
 */
export async function spawnPty(
  file: string,
  options: SpawnOptions,
  sink: ProcessSink,
  handed: readonly number[] = [],
): Promise<SpawnedProcess> {
  let term: IPty;
  try {
    term = await spawnTerm(file, options, handed);
  } finally {
    // The child has its copies (node-pty's fork is done), or there is none.
    for (const fd of handed) closeSync(fd);
  }
  return ptyProcess(term, options, sink);
}

/**
 * node-pty's child of `file`. `handed` (close-on-exec, as every fd this process makes) are inherited by this
 * child alone: node-pty's child keeps every descriptor without close-on-exec, so the flag is cleared right
 * before its spawn, and spawnPty closes them right after it, in the same synchronous run: every child this
 * process starts is forked on this thread (child_process, node-pty; libuv's threadpool forks none), so no
 * other fork can happen while the flag is clear.
 */
async function spawnTerm(file: string, options: SpawnOptions, handed: readonly number[]): Promise<IPty> {
  const pty = await loadNodePty();
  const native = handed.length > 0 ? loadNativePipe() : null;
  if (handed.length > 0 && native === null) {
    throw new ProcessError(
      'spawn_failed',
      `a terminal's wrapper cannot inherit descriptors: ${nativePipeUnavailableReason()}`,
    );
  }
  if (perlPath === undefined) {
    try {
      perlPath = resolveProgram('perl', options.serverPath ?? FALLBACK_PATH, '/');
    } catch {
      perlPath = null;
    }
  }
  const perl = perlPath;
  const env: Record<string, string> = { ...options.env };
  env.SHELL ??= loginShell();
  let ptyFile = file;
  let ptyArgs = options.argv.slice(1);
  if (perl !== null) {
    const remove: string[] = [];
    const restore: string[] = [];
    if (env.TERM === undefined) remove.push('TERM');
    if (env.PWD === undefined) remove.push('PWD');
    else restore.push('PWD', env.PWD);
    // PERL_BADLANG=0 keeps perl quiet about a broken locale (its warning would land in the PTY).
    if (env.PERL_BADLANG === undefined) {
      env.PERL_BADLANG = '0';
      remove.push('PERL_BADLANG');
    }
    ptyFile = perl;
    ptyArgs = [
      '-e',
      PTY_TRAMPOLINE,
      '--',
      String(remove.length),
      String(restore.length / 2),
      ...remove,
      ...restore,
      file,
      options.arg0 ?? options.argv[0]!,
      ...ptyArgs,
    ];
  } else if (options.arg0 != null) {
    throw new ProcessError('spawn_failed', 'arg0 on a tty needs perl, which was not found');
  }
  const size = options.size ?? DEFAULT_PTY_SIZE;
  try {
    for (const fd of handed) native!.clearCloexec(fd);
    // encoding null: raw Buffers out, bytes in.
    const term = pty.spawn(ptyFile, ptyArgs, {
      cols: size.cols,
      rows: size.rows,
      cwd: options.cwd,
      env,
      encoding: null,
    });
    closeMasterOnExec(term);
    return term;
  } catch (err) {
    throw spawnError(err);
  }
}

/**
 * node-pty opens the PTY master without close-on-exec, so every child started after it (pipes or PTY, of any
 * session or key) would inherit another process's terminal and could read and type into it. The flag is set
 * in the same synchronous run as the spawn: no other fork can come between (every child is forked on this
 * thread). Without @tether/native-pipe (which pipes need too, and whose absence is warned about) it cannot be
 * set.
 */
function closeMasterOnExec(term: IPty): void {
  const fd = ptyMasterFd(term);
  if (fd !== null) loadNativePipe()?.setCloexec(fd);
}

function ptyProcess(term: IPty, options: SpawnOptions, sink: ProcessSink): SpawnedProcess {
  const pid = term.pid;
  // Noted so that a subreaper's sweep does not take it for an orphan (orphans.ts).
  options.adopter?.markOwnChild(pid);
  // node-pty's master fd and socket are not in its typings: user-read checks them (privates.ts). Without
  // the fd, input goes through node-pty's own write, and no last output is drained on destroy.
  const masterFd = ptyMasterFd(term);
  const input: Writable = masterFd !== null ? new PtyInput(masterFd) : new PtyWriteInput(term);
  let streamOpen = true;
  const endStream = () => {
    if (!streamOpen) return;
    streamOpen = false;
    // The master fd is closed with the socket: stop writing to it before the number can be reused.
    input.destroy();
    sink.streamEnd('pty');
  };
  term.onData((data) => sink.output('pty', data as unknown as Buffer));
  const masterSocket = ptySocket(term);
  if (masterSocket !== null && masterFd !== null) keepOutputOnDestroy(masterSocket, masterFd, sink);
  // node-pty emits 'close' (socket EIO/EOF) before onExit, and onExit only after that close.
  (term as unknown as { on(event: 'close', listener: () => void): void }).on('close', endStream);
  let exitedFired = false;
  const exited = new Promise<void>((done) => {
    term.onExit(({ exitCode, signal }) => {
      exitedFired = true;
      options.adopter?.forgetOwnChild(pid);
      endStream();
      // portable-pty (Codex) reports exit code 1 for a PTY child killed by a signal.
      sink.exit(signal ? 1 : exitCode);
      done();
    });
  });
  return {
    pid,
    streams: ['pty'],
    stdin: input,
    exited,
    signalGroup: (signal) => {
      // node-pty returns as soon as it forked: until the child's setsid() there is no group to signal,
      // so a signal sent right after the start goes to the child itself, which holds every signal blocked
      // from the fork until just before its exec.
      signalGroup(pid, signal, !exitedFired);
    },
    kill: () => {
      killGroupAndStrays(pid);
      if (!exitedFired) term.kill('SIGKILL');
    },
    resize: (newSize) => {
      checkSize(newSize);
      if (streamOpen) term.resize(newSize.cols, newSize.rows);
    },
    pauseOutput: (paused) => {
      if (!streamOpen) return;
      if (paused) term.pause();
      else term.resume();
    },
    destroyStreams: () => {
      if (streamOpen) (term as unknown as { destroy(): void }).destroy();
    },
  };
}

/**
 * The PTY socket can go away while output is still pending, in three ways: libuv ends the stream when
 * poll reports POLLHUP after a short read, yet on a PTY master the kernel may still hold output in its
 * flip buffer (the next read() would return it, then EIO); node-pty destroys the socket 200 ms after the
 * child's exit if it has not closed by then; and a paused socket discards chunks it read but did not
 * emit. So every destroy first emits what the socket buffered, then drains the master synchronously,
 * while the fd is still open.
 */
function keepOutputOnDestroy(socket: Readable, masterFd: number, sink: ProcessSink): void {
  const destroy = socket.destroy.bind(socket);
  socket.destroy = (err?: Error) => {
    if (!socket.destroyed) {
      // With a 'data' listener attached, read() emits each buffered chunk as 'data' (paused or not).
      while (socket.read() !== null);
      drainMaster(masterFd, (chunk) => sink.output('pty', chunk));
    }
    return destroy(err);
  };
}

/** Reads what is left on a PTY master; stops at EOF, EIO (all read, slave closed) or EAGAIN. */
function drainMaster(fd: number, output: (chunk: Buffer) => void): void {
  const buffer = Buffer.allocUnsafe(64 * 1024);
  for (;;) {
    let length: number;
    try {
      length = readSync(fd, buffer, 0, buffer.length, null);
    } catch {
      return;
    }
    if (length === 0) return;
    output(Buffer.from(buffer.subarray(0, length)));
  }
}

let cachedLoginShell: string | undefined;

/** The server user's login shell (what portable-pty puts in SHELL), `/bin/sh` when unknown. */
function loginShell(): string {
  if (cachedLoginShell === undefined) {
    try {
      cachedLoginShell = userInfo().shell || '/bin/sh';
    } catch {
      cachedLoginShell = '/bin/sh';
    }
  }
  return cachedLoginShell;
}

/** PTY input through node-pty's public `write`, for a node-pty whose master fd is not where it was checked. */
class PtyWriteInput extends Writable {
  readonly #term: IPty;

  constructor(term: IPty) {
    super({ decodeStrings: true });
    this.#term = term;
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    // node-pty may keep what it is given until its socket writes it; the callback says this stream is done
    // with `chunk` (whose memory may then serve another request), so node-pty gets a copy.
    this.#term.write(Buffer.from(chunk));
    callback();
  }
}

/**
 * Writes to the PTY master with backpressure node-pty's own `write` does not expose: the master is
 * non-blocking, so `writeSync` never blocks; on EAGAIN (the terminal's input buffer is full) the rest is
 * retried shortly. Synchronous writes also mean no write can be in flight when the fd is closed.
 */
class PtyInput extends Writable {
  readonly #fd: number;
  #retryTimer: NodeJS.Timeout | undefined;
  #pending: ((err?: Error | null) => void) | undefined;

  constructor(fd: number) {
    super({ decodeStrings: true });
    this.#fd = fd;
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    this.#pending = callback;
    this.#writeFrom(chunk, 0, 0);
  }

  #writeFrom(chunk: Buffer, offset: number, attempt: number): void {
    this.#retryTimer = undefined;
    while (offset < chunk.length) {
      try {
        offset += writeSync(this.#fd, chunk, offset, chunk.length - offset);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'EAGAIN') {
          const delay = Math.min(2 ** attempt, PTY_WRITE_RETRY_MAX_MS);
          this.#retryTimer = setTimeout(() => this.#writeFrom(chunk, offset, attempt + 1), delay);
          this.#retryTimer.unref();
          return;
        }
        this.#settle(err as Error);
        return;
      }
    }
    this.#settle(null);
  }

  #settle(err: Error | null): void {
    const callback = this.#pending;
    this.#pending = undefined;
    callback?.(err);
  }

  override _destroy(err: Error | null, callback: (err?: Error | null) => void): void {
    clearTimeout(this.#retryTimer);
    this.#settle(err ?? new Error('pty closed'));
    callback(err);
  }
}
