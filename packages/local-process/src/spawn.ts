/**
 * Starting one child: pipes (Node `child_process`, over pipes from @tether/native-pipe where it is built)
 * or a PTY (pty.ts); the checks before either are in spawn-checks.ts, the signals and kills in signals.ts.
 * The child always leads its own session and process group (pgid = pid), so signals and kills go to the
 * whole group. Output is delivered in the chunks the OS read gives (up to 64 KiB for libuv), without
 * re-slicing, straight to a `ProcessSink`.
 */
import { spawn as spawnChild } from 'node:child_process';
import { closeSync, constants as fsConstants, openSync } from 'node:fs';
import { Socket } from 'node:net';
import { constants as osConstants } from 'node:os';
import type { Readable, Writable } from 'node:stream';
import { loadNativePipe, type NativePipe, nativePipeUnavailableReason } from '@tether/native-pipe';
import { ProcessError } from './errors.js';
import { noteChildProcess } from './orphans.js';
import { spawnPty } from './pty.js';
import { readIntoPool } from './read-pool.js';
import { killGroupAndStrays, signalGroup } from './signals.js';
import { checkCwd, checkExecFormat, FALLBACK_PATH, resolveProgram, spawnError, validate } from './spawn-checks.js';
import type { OutputStream, ProcessSink, SpawnedProcess, SpawnOptions } from './types.js';
import { placeInheritedFds } from './wrap-fds.js';

export type { ProcessSink, SpawnedProcess, SpawnOptions } from './types.js';

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
  // Made for this child alone: spawnPipes and spawnPty own them from here and close them once it has them.
  const handed = wrap.inheritFds?.() ?? [];
  let inner: string[];
  try {
    // A pipe child has them as 4, 5, … (its stdio array); a PTY child at this process's numbers.
    const at = options.tty ? handed : handed.map((_, i) => 4 + i);
    // Node and libuv hold the low numbers from startup: none of ours is ever 0-3 (fd 3 is the wrapper's file).
    if (handed.some((fd) => fd <= 3)) throw new Error(`cannot hand descriptors ${handed.join(', ')} to a wrapper`);
    inner = [...placeInheritedFds(wrap.args, at), file, ...options.argv.slice(1)];
  } catch (err) {
    for (const fd of handed) closeSync(fd);
    throw new ProcessError('spawn_failed', (err as Error).message);
  }
  if (!options.tty) {
    return spawnPipes(wrap.file, { ...options, argv: [wrap.file, ...inner] }, sink, wrap.fd3File, handed);
  }
  // A PTY child cannot be given descriptors at chosen numbers: a shell opens the file as fd 3 and becomes the
  // wrapper; inherited ones keep their numbers.
  if (wrap.fd3File === null) return spawnPty(wrap.file, { ...options, argv: [wrap.file, ...inner] }, sink, handed);
  const sh = '/bin/sh';
  return spawnPty(
    sh,
    { ...options, argv: [sh, '-c', 'exec 3<"$0" && exec "$@"', wrap.fd3File, wrap.file, ...inner] },
    sink,
    handed,
  );
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

/**
 * `handed` (owned from the call, closed once the child has them or the spawn failed) become the child's fds
 * 4, 5, … beside `fd3File`'s fd 3.
 */
function spawnPipes(
  file: string,
  options: SpawnOptions,
  sink: ProcessSink,
  fd3File: string | null = null,
  handed: readonly number[] = [],
): Promise<SpawnedProcess> {
  const native = loadNativePipe();
  if (native === null) warnSocketpairs();
  let pipes: StdioPipes | null = null;
  try {
    if (native !== null) pipes = openStdioPipes(native, options.pipeStdin);
  } catch (err) {
    for (const fd of handed) closeSync(fd);
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
    if (fd3 !== null || handed.length > 0) stdio.push(fd3 ?? 'ignore', ...handed);
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
    for (const fd of handed) closeSync(fd);
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
  const growth = pipes === null ? null : (options.pipeGrowth ?? null);
  /** Raises the pipe of `fd` (PipeGrowth) and gives its share back when `stream` closes. */
  const raiser = (fd: number, stream: Readable | Writable) => () => {
    // A destroyed stream's fd is closed, and its number may already be another file's.
    if (stream.destroyed) return false;
    const giveBack = growth?.grow(fd) ?? null;
    if (giveBack === null) return false;
    if (stream.closed) giveBack();
    else stream.once('close', giveBack);
    return true;
  };
  const forward = (stream: OutputStream, readable: Readable, fd: number | null) => {
    const output = (chunk: Buffer) => sink.output(stream, chunk);
    const pool = options.readBuffers;
    const raise = fd === null || growth === null ? undefined : raiser(fd, readable);
    // Each stream is a net.Socket: reads can go into the pool's buffers.
    if (!pool || !(readable instanceof Socket) || !readIntoPool(readable, pool, output, raise))
      readable.on('data', output);
    // 'close' follows 'end', and also a read error or destroy(): either way the stream is over.
    readable.on('close', () => sink.streamEnd(stream));
    readable.on('error', () => {});
  };
  forward('stdout', stdout, pipes?.stdout.parent ?? null);
  forward('stderr', stderr, pipes?.stderr.parent ?? null);
  // Raised once, when a large write first comes (a file piped in: `exec -i … < file`).
  let raiseStdin =
    stdin !== null && pipes?.stdin != null && growth !== null ? raiser(pipes.stdin.parent, stdin) : undefined;
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
        bulkStdin: () => {
          raiseStdin?.();
          raiseStdin = undefined;
        },
      });
    });
  });
}
