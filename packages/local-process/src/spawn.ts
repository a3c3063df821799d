/**
 * Starting one child: pipes (Node `child_process`, over pipes from @tether/native-pipe where it is built)
 * or a PTY (node-pty; this is the only module that imports it). The child always leads its own session
 * and process group (pgid = pid), so signals and kills go to the whole group. Output is delivered in the
 * chunks the OS read gives (up to 64 KiB for libuv), without re-slicing, straight to a `ProcessSink`.
 */
import { spawn as spawnChild } from 'node:child_process';
import {
  accessSync,
  closeSync,
  constants as fsConstants,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  statSync,
  writeSync,
} from 'node:fs';
import { Socket } from 'node:net';
import { constants as osConstants, userInfo } from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { Writable } from 'node:stream';
import type { ReadBufferPool } from '@tether/bytes';
import { loadNativePipe, type NativePipe, nativePipeUnavailableReason } from '@tether/native-pipe';
import { ptyMasterFd, ptySocket } from '@tether/user-read';
import type { IPty } from 'node-pty';
import { ProcessError } from './errors.js';
import { type ChildLedger, noteChildProcess } from './orphans.js';
import { descendantsOf } from './proc.js';
import { readIntoPool } from './read-pool.js';
import type { OutputStream, ProcessWrap, PtySize } from './types.js';

export const DEFAULT_PTY_SIZE: Readonly<PtySize> = { rows: 24, cols: 80 };
/** Used when neither the child env nor the server has a PATH (what a login shell would start from). */
const FALLBACK_PATH = '/usr/local/bin:/usr/bin:/bin';
/** Longest pause between retries of a PTY input write the kernel refused with EAGAIN (its buffer is ~4 KiB). */
const PTY_WRITE_RETRY_MAX_MS = 10;
const MAX_PTY_DIMENSION = 0xffff;
/** Most descendants a kill looks for beyond the group (a fork bomb in the group dies with the group). */
const MAX_STRAYS = 4096;

export interface SpawnOptions {
  argv: readonly string[];
  cwd: string;
  env: Readonly<Record<string, string>>;
  tty: boolean;
  pipeStdin: boolean;
  arg0?: string | null | undefined;
  size?: PtySize | null | undefined;
  /** The server's PATH, searched for argv[0] when the child env has none. */
  serverPath: string | undefined;
  /** Read stdout and stderr into these reusable buffers (pipes only; see ProcessTableOptions). */
  readBuffers?: ReadBufferPool | null | undefined;
  /** The program the command runs inside (a sandbox), or none. */
  wrap?: ProcessWrap | null | undefined;
  /** Where the child is noted as this process's own (the orphan adopter, see ProcessTableOptions.adopter). */
  adopter?: ChildLedger | null | undefined;
}

/** Where a running child reports. Calls happen in the order the OS delivered the events. */
export interface ProcessSink {
  output(stream: OutputStream, chunk: Buffer): void;
  /** The stream reached EOF or was destroyed; no more output on it. */
  streamEnd(stream: OutputStream): void;
  /**
   * The direct child was reaped: its exit code; after a signal death 128 + signal for pipes and 1 for a
   * PTY, as Codex reports them.
   */
  exit(exitCode: number): void;
}

export interface SpawnedProcess {
  readonly pid: number;
  /** The output streams the sink will see end: `stdout`+`stderr`, or `pty`. */
  readonly streams: readonly OutputStream[];
  /** Child stdin (the PTY master for a tty); null when stdin is /dev/null. */
  readonly stdin: Writable | null;
  /** Settles when the direct child has been reaped. */
  readonly exited: Promise<void>;
  /** Sends `signal` to the child's process group; a group that is already gone is not an error. */
  signalGroup(signal: NodeJS.Signals): void;
  /** SIGKILL to the whole group and to the direct child. */
  kill(): void;
  resize(size: PtySize): void;
  /**
   * Stops (true) or restarts (false) reading output: while paused, the OS buffers fill and the child
   * blocks on its next write. Exit is still observed.
   */
  pauseOutput(paused: boolean): void;
  /** Stops reading output (used at shutdown when a descendant that left the group still holds the pipes). */
  destroyStreams(): void;
}

/** Checks cwd and argv[0], then starts the child. Rejects with a `ProcessError` before spawning when it cannot run. */
export async function spawnProcess(options: SpawnOptions, sink: ProcessSink): Promise<SpawnedProcess> {
  validate(options);
  // Synchronous on purpose: a few local stat calls cost microseconds, a thread-pool round trip each costs
  // far more, and this is the latency of every process start.
  checkCwd(options.cwd);
  const program = options.argv[0]!;
  const searchPath = options.env.PATH ?? options.serverPath ?? FALLBACK_PATH;
  const file = resolveProgram(program, searchPath, options.cwd);
  checkExecFormat(file);
  const wrap = options.wrap ?? null;
  if (wrap === null || wrap.unwrapped === true)
    return options.tty ? spawnPty(file, options, sink) : spawnPipes(file, options, sink);
  // bubblewrap 0.8 cannot set the command's argv[0] (its --argv0 came later).
  if (options.arg0 != null) throw new ProcessError('invalid_argument', 'arg0 is not supported for a sandboxed process');
  const inner = [...wrap.args, file, ...options.argv.slice(1)];
  if (!options.tty) return spawnPipes(wrap.file, { ...options, argv: [wrap.file, ...inner] }, sink, wrap.fd3File);
  // A PTY child cannot be given more descriptors: a shell opens the file as fd 3 and becomes the wrapper.
  if (wrap.fd3File === null) return spawnPty(wrap.file, { ...options, argv: [wrap.file, ...inner] }, sink);
  const sh = '/bin/sh';
  return spawnPty(
    sh,
    { ...options, argv: [sh, '-c', 'exec 3<"$0" && exec "$@"', wrap.fd3File, wrap.file, ...inner] },
    sink,
  );
}

function validate(options: SpawnOptions): void {
  if (options.argv.length === 0) throw new ProcessError('invalid_argument', 'argv must not be empty');
  const texts = [...options.argv, options.cwd, options.arg0 ?? ''];
  for (const [name, value] of Object.entries(options.env)) texts.push(name, value);
  if (texts.some((text) => text.includes('\0'))) {
    throw new ProcessError('invalid_argument', 'argv, cwd, arg0 and env must not contain NUL bytes');
  }
  if (Object.keys(options.env).some((name) => name === '' || name.includes('='))) {
    throw new ProcessError('invalid_argument', 'env names must be non-empty and must not contain `=`');
  }
  if (options.size) checkSize(options.size);
}

export function checkSize(size: PtySize): void {
  const ok = (n: number) => Number.isInteger(n) && n >= 1 && n <= MAX_PTY_DIMENSION;
  if (!ok(size.rows) || !ok(size.cols)) {
    throw new ProcessError('invalid_argument', `pty size must be 1..${MAX_PTY_DIMENSION} rows and cols`);
  }
}

/**
 * The cwd is checked before spawning. As with Codex (whose chdir fails in the child), a missing cwd or a
 * file is a spawn failure with the bare OS text; only a relative path, which the request contract rules
 * out, is an invalid argument.
 */
function checkCwd(cwd: string): void {
  if (!path.isAbsolute(cwd)) throw new ProcessError('invalid_argument', `cwd \`${cwd}\` must be an absolute path`);
  let isDirectory: boolean;
  try {
    isDirectory = statSync(cwd).isDirectory();
  } catch (err) {
    throw spawnError(err);
  }
  if (!isDirectory) throw spawnFailed('ENOTDIR');
}

/**
 * execvp's lookup, done before spawning so a failure is reported clearly and the id released: a name
 * with a `/` is taken as a path (relative to the child's cwd); a bare name is searched in `searchPath`
 * (empty entries mean the cwd), skipping entries that exist but are not executable files.
 */
function resolveProgram(program: string, searchPath: string, cwd: string): string {
  if (program === '') throw spawnFailed('ENOENT');
  if (program.includes('/')) {
    const file = path.resolve(cwd, program);
    const problem = executableProblem(file);
    if (problem !== null) throw spawnFailed(problem);
    return file;
  }
  let sawDenied = false;
  for (const dir of searchPath.split(':')) {
    const file = path.resolve(cwd, dir, program);
    const problem = executableProblem(file);
    if (problem === null) return file;
    if (problem === 'EACCES') sawDenied = true;
  }
  throw spawnFailed(sawDenied ? 'EACCES' : 'ENOENT');
}

/** null when `file` is an executable regular file, else the errno code execve would give. */
function executableProblem(file: string): string | null {
  try {
    if (!statSync(file).isFile()) return 'EACCES';
    accessSync(file, fsConstants.X_OK);
    return null;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EACCES' ? 'EACCES' : 'ENOENT';
  }
}

/** The first bytes of an ELF binary and of a script the kernel runs through its `#!` interpreter. */
const ELF_MAGIC = Buffer.from([0x7f, 0x45, 0x4c, 0x46]);
const SHEBANG = Buffer.from('#!');

/**
 * execve fails with ENOEXEC on a file the kernel cannot run, and glibc's execvp (which libuv and node-pty
 * call, and which perl's exec calls) then runs the file with /bin/sh instead: an executable data file or
 * binary of another machine would be read as shell commands. Codex (Rust's posix_spawnp, which has no such
 * fallback) fails with `Exec format error (os error 8)`; so do we, before spawning, from the file's first
 * bytes. A file this user may execute but not read cannot be checked (nor read by sh): the kernel decides.
 * When binfmt_misc has handlers registered (qemu, wine, …) other formats may run, so only an empty file is
 * refused then.
 */
function checkExecFormat(file: string): void {
  // The formats below are Linux's (another system's native binaries, Mach-O for one, are not ELF).
  if (process.platform !== 'linux') return;
  const head = Buffer.alloc(ELF_MAGIC.length);
  let length: number;
  let fd: number | undefined;
  try {
    fd = openSync(file, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK);
    length = readSync(fd, head, 0, head.length, 0);
  } catch {
    return;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
  const start = head.subarray(0, length);
  if (start.equals(ELF_MAGIC) || start.subarray(0, SHEBANG.length).equals(SHEBANG)) return;
  if (length > 0 && binfmtMiscHandlers()) return;
  throw spawnFailed('ENOEXEC');
}

/** Whether binfmt_misc is enabled with at least one handler registered. */
function binfmtMiscHandlers(): boolean {
  const dir = '/proc/sys/fs/binfmt_misc';
  try {
    if (readFileSync(path.join(dir, 'status'), 'utf8').trim() !== 'enabled') return false;
    return readdirSync(dir).some((name) => name !== 'status' && name !== 'register');
  } catch {
    return false;
  }
}

/** Codex reports a failed spawn with Rust's `io::Error` text alone: `No such file or directory (os error 2)`. */
function spawnFailed(osCode: string, cause?: unknown): ProcessError {
  return new ProcessError('spawn_failed', errnoText(osCode), { osCode, cause });
}

function spawnError(err: unknown): ProcessError {
  const osCode = (err as NodeJS.ErrnoException | null)?.code;
  if (typeof osCode === 'string' && errnoText(osCode) !== osCode) return spawnFailed(osCode, err);
  return new ProcessError('spawn_failed', err instanceof Error ? err.message : String(err), { cause: err });
}

/** strerror texts libuv's error map lacks (it has no UV_ENOEXEC). */
const EXTRA_ERRNO_TEXT: Readonly<Record<string, string>> = { ENOEXEC: 'exec format error' };

/** Rust's `io::Error` display for an errno code: `No such file or directory (os error 2)`. */
function errnoText(code: string): string {
  const errno = (osConstants.errno as Record<string, number>)[code];
  const description = errno === undefined ? undefined : (systemErrorText(-errno) ?? EXTRA_ERRNO_TEXT[code]);
  if (errno === undefined || description === undefined) return code;
  return `${description.charAt(0).toUpperCase()}${description.slice(1)} (os error ${errno})`;
}

/**
 * How a pipe child's stdio is made: `pipe` (pipe2, as sshd and Codex do) or `socketpair` (libuv's, when
 * @tether/native-pipe is not built or is off), on which `/dev/stdout`, `/dev/stderr` and `/dev/stdin`
 * cannot be opened (ENXIO). `reason` says why there are no pipes.
 */
export function pipeStdio(): { kind: 'pipe' | 'socketpair'; reason: string | null } {
  return loadNativePipe() === null
    ? { kind: 'socketpair', reason: nativePipeUnavailableReason() }
    : { kind: 'pipe', reason: null };
}

let warnedSocketpairs = false;

/** Once per process, unless socketpairs were asked for (TETHER_NATIVE_PIPE=off). */
function warnSocketpairs(): void {
  if (warnedSocketpairs || process.env.TETHER_NATIVE_PIPE === 'off') return;
  warnedSocketpairs = true;
  process.emitWarning(
    `pipe children get socketpairs for stdio, so they cannot open /dev/stdout or /dev/stderr (@tether/native-pipe: ${nativePipeUnavailableReason()})`,
    { code: 'TETHER_NO_NATIVE_PIPE' },
  );
}

/** One pipe per stdio stream: `child` becomes the child's fd, `parent` is kept here. */
interface StdioPipe {
  child: number;
  parent: number;
}

interface StdioPipes {
  /** null when the child's stdin is /dev/null. */
  stdin: StdioPipe | null;
  stdout: StdioPipe;
  stderr: StdioPipe;
}

/** Makes the pipes, or none: a failure part-way closes what was made. */
function openStdioPipes(native: NativePipe, pipeStdin: boolean): StdioPipes {
  const made: number[] = [];
  const open = (childReads: boolean): StdioPipe => {
    const [readFd, writeFd] = native.pipe();
    made.push(readFd, writeFd);
    return childReads ? { child: readFd, parent: writeFd } : { child: writeFd, parent: readFd };
  };
  try {
    return { stdin: pipeStdin ? open(true) : null, stdout: open(false), stderr: open(false) };
  } catch (err) {
    for (const fd of made) closeSync(fd);
    throw err;
  }
}

function pipeEnds(pipes: StdioPipes, side: keyof StdioPipe): number[] {
  const ends = [pipes.stdout[side], pipes.stderr[side]];
  if (pipes.stdin !== null) ends.push(pipes.stdin[side]);
  return ends;
}

function spawnPipes(
  file: string,
  options: SpawnOptions,
  sink: ProcessSink,
  fd3File: string | null = null,
): Promise<SpawnedProcess> {
  const native = loadNativePipe();
  if (native === null) warnSocketpairs();
  let pipes: StdioPipes | null = null;
  try {
    if (native !== null) pipes = openStdioPipes(native, options.pipeStdin);
  } catch (err) {
    return Promise.reject(spawnError(err));
  }
  let child: ReturnType<typeof spawnChild>;
  let fd3: number | null = null;
  try {
    if (fd3File !== null) fd3 = openSync(fd3File, fsConstants.O_RDONLY);
    const stdio: Array<number | 'pipe' | 'ignore'> =
      pipes === null
        ? [options.pipeStdin ? 'pipe' : 'ignore', 'pipe', 'pipe']
        : [pipes.stdin?.child ?? 'ignore', pipes.stdout.child, pipes.stderr.child];
    if (fd3 !== null) stdio.push(fd3);
    child = spawnChild(file, options.argv.slice(1), {
      argv0: options.arg0 ?? options.argv[0]!,
      cwd: options.cwd,
      env: options.env,
      // Given fds are dup2'ed onto 0-2 (and 3) in the child, which clears their close-on-exec there only.
      stdio,
      // setsid(): the child leads a new session and process group, so pgid = pid.
      detached: true,
    });
    noteChildProcess(options.adopter, child);
  } catch (err) {
    if (pipes !== null) for (const fd of pipeEnds(pipes, 'parent')) closeSync(fd);
    return Promise.reject(spawnError(err));
  } finally {
    if (fd3 !== null) closeSync(fd3);
    // The fork has copied them (uv_spawn returns after it), so the child's ends go now, before anything
    // else runs: while this process holds a write end, the reader never sees EOF (stdout and stderr would
    // not end when the child exits, stdin would not end when we close it).
    if (pipes !== null) for (const fd of pipeEnds(pipes, 'child')) closeSync(fd);
  }
  // libuv opens a FIFO fd as a pipe handle (non-blocking on our end only: the child's end is another open
  // file description), so these are net.Sockets like the ones child_process makes over its socketpairs.
  const reader = (fd: number) => new Socket({ fd, readable: true, writable: false });
  const stdout = pipes === null ? child.stdout! : reader(pipes.stdout.parent);
  const stderr = pipes === null ? child.stderr! : reader(pipes.stderr.parent);
  const stdin =
    pipes === null
      ? child.stdin
      : pipes.stdin && new Socket({ fd: pipes.stdin.parent, readable: false, writable: true });
  const forward = (stream: OutputStream, readable: Readable) => {
    const output = (chunk: Buffer) => sink.output(stream, chunk);
    const pool = options.readBuffers;
    // Each stream is a net.Socket: reads can go into the pool's buffers.
    if (!pool || !(readable instanceof Socket) || !readIntoPool(readable, pool, output)) readable.on('data', output);
    // 'close' follows 'end', and also a read error or destroy(): either way the stream is over.
    readable.on('close', () => sink.streamEnd(stream));
    readable.on('error', () => {});
  };
  forward('stdout', stdout);
  forward('stderr', stderr);
  // Node destroys stdin itself when the child exits (its own, and ours below); EPIPE surfaces to the stdin
  // writer as an error.
  stdin?.on('error', () => {});

  return new Promise<SpawnedProcess>((resolve, reject) => {
    const onSpawnError = (err: Error) => {
      stdout.destroy();
      stderr.destroy();
      if (pipes !== null) stdin?.destroy();
      reject(spawnError(err));
    };
    child.once('error', onSpawnError);
    child.once('spawn', () => {
      child.off('error', onSpawnError);
      // Later 'error's only report a failed child.kill(); the group kill before it is what counts.
      child.on('error', () => {});
      const pid = child.pid!;
      let onExited!: () => void;
      const exited = new Promise<void>((done) => {
        onExited = done;
      });
      child.once('exit', (code, signal) => {
        // What Node does to the stdin pipe it made: a write after the exit fails instead of filling a pipe
        // that a descendant may still hold open.
        if (pipes !== null) stdin?.destroy();
        // A signal death is reported shell-style, 128 + signal number (Codex reports 137 after terminate).
        sink.exit(code ?? 128 + (signal === null ? 0 : osConstants.signals[signal]));
        onExited();
      });
      resolve({
        pid,
        streams: ['stdout', 'stderr'],
        stdin,
        exited,
        signalGroup: (signal) => signalGroup(pid, signal),
        kill: () => {
          killGroupAndStrays(pid);
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
        },
        resize: () => {
          throw new ProcessError('invalid_argument', 'resize needs a tty process');
        },
        pauseOutput: (paused) => {
          for (const readable of [stdout, stderr]) {
            if (paused) readable.pause();
            else readable.resume();
          }
        },
        destroyStreams: () => {
          stdout.destroy();
          stderr.destroy();
        },
      });
    });
  });
}

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
async function spawnPty(file: string, options: SpawnOptions, sink: ProcessSink): Promise<SpawnedProcess> {
  const pty = await loadNodePty();
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
  let term: IPty;
  try {
    // encoding null: raw Buffers out, bytes in.
    term = pty.spawn(ptyFile, ptyArgs, { cols: size.cols, rows: size.rows, cwd: options.cwd, env, encoding: null });
  } catch (err) {
    throw spawnError(err);
  }
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

/**
 * process.kill on the negative pid: the whole group. ESRCH (no such group: gone, or not yet made) is not
 * an error; with `orLeader` the signal then goes to the process `pgid` itself (ESRCH there neither).
 */
function signalGroup(pgid: number, signal: NodeJS.Signals, orLeader = false): void {
  for (const target of orLeader ? [-pgid, pgid] : [-pgid]) {
    try {
      process.kill(target, signal);
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
    }
  }
}

/** PTY input through node-pty's public `write`, for a node-pty whose master fd is not where it was checked. */
class PtyWriteInput extends Writable {
  readonly #term: IPty;

  constructor(term: IPty) {
    super({ decodeStrings: true });
    this.#term = term;
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    this.#term.write(chunk);
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

/**
 * The teardown kill: SIGKILL to the group and to every descendant still linked to the child by parents,
 * so one that left the group (setsid, setpgid: a daemon, `setsid sleep &` under a shell that waits) dies
 * too. The descendants are stopped first and looked for again, so none forks meanwhile; all before the
 * group dies, since a dead parent's children are reparented out of the tree. A descendant already
 * orphaned (its parent exited earlier) is not in the tree: only a subreaper finds it (orphans.ts).
 */
function killGroupAndStrays(pid: number): void {
  // The child first: running, it would see its children die before its own SIGKILL arrives, and a shell
  // in `wait` then exits 0 on its own (under load, often), where one group kill reports 137 as Codex does.
  signalProcess(pid, 'SIGSTOP');
  try {
    const first = descendantsOf(pid, MAX_STRAYS);
    for (const descendant of first) signalProcess(descendant, 'SIGSTOP');
    const strays = new Set([...first, ...(first.length > 0 ? descendantsOf(pid, MAX_STRAYS) : [])]);
    // Stopped, they cannot fork; killed before the group, so that a failing group kill leaves none stopped.
    for (const stray of strays) signalProcess(stray, 'SIGKILL');
    signalGroup(pid, 'SIGKILL');
  } finally {
    // Not left stopped, whatever failed above.
    signalProcess(pid, 'SIGKILL');
  }
}

/**
 * process.kill on one descendant, best effort: gone already (ESRCH), or not ours to signal (EPERM: a
 * setuid program), is no reason to stop the teardown; the group kill that follows reports real failures.
 */
function signalProcess(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // See above.
  }
}

/**
 * The OS's text for an errno. node:util through process.getBuiltinModule, at use: the harness bundles this
 * module, and an import there would make every harness command load node:util's lazy exports at start.
 */
function systemErrorText(errno: number): string | undefined {
  return process.getBuiltinModule('node:util').getSystemErrorMap().get(errno)?.[1];
}
