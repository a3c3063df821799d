import type { Writable } from 'node:stream';
import type { ReadBufferPool } from '@tether/bytes';
import type { ChildLedger } from './orphans.js';
import type { OutputBudget } from './output-budget.js';
import type { PipeGrowth } from './pipe-growth.js';
/**
 * Public contract of the process engine. The executor (one ProcessTable per session) and the SDK's
 * local backend use only what is exported from index.ts.
 */

/** Where a chunk came from. A PTY merges both streams into `pty`. */
export type OutputStream = 'stdout' | 'stderr' | 'pty';

/** `interrupt` is Codex's only signal; the rest are Tether extensions. */
export type SignalName = 'interrupt' | 'terminate' | 'kill' | 'hangup' | 'quit' | 'user1' | 'user2';

export type WriteStatus = 'accepted' | 'unknownProcess' | 'stdinClosed' | 'starting';

export interface PtySize {
  rows: number;
  cols: number;
}

/**
 * Where a process's session is recorded (the executor's `--record-dir`): what the child printed, the input that
 * reached it and who sent it, its resizes and its exit, in that order. Called synchronously on the paths it
 * records, so it must only queue (never block, never throw); `close` once the process is gone from the table.
 */
export interface RecordingSink {
  output(stream: OutputStream, chunk: Buffer): void;
  input(chunk: Buffer, from: string): void;
  resize(rows: number, cols: number): void;
  exit(exitCode: number): void;
  close(): void;
}

export interface StartRequest {
  /** Caller-chosen key, unique within the table. */
  processId: string;
  /** Non-empty; argv[0] is resolved through the child's PATH (or the server's when the child has none). */
  argv: string[];
  /** Native absolute path of an existing directory. */
  cwd: string;
  /** The exact child environment (env policy already applied, see buildChildEnv). */
  env: Record<string, string>;
  tty: boolean;
  /** Keep stdin writable for a non-tty child; otherwise its stdin is /dev/null. */
  pipeStdin: boolean;
  /** Process-visible argv[0]; argv[0] is still the program that runs. */
  arg0?: string | null;
  /** PTY size at start (tty only); default 24 rows x 80 cols. */
  size?: PtySize | null;
  /**
   * Flow control: at most this many output bytes unacknowledged (`ProcessTable.ack`) before the child's
   * output stops being read, so it blocks on write; nothing is dropped. Null: Codex's retention semantics.
   * The caller clamps it (exec-protocol's clampFlowWindow).
   */
  flowWindowBytes?: number | null;
  /** Records the session (the table calls it as things happen, and closes it with the process). */
  recording?: RecordingSink | null;
  /** Runs the command inside another program (a sandbox); see ProcessWrap. */
  wrap?: ProcessWrap | null;
}

/**
 * A program the command runs inside (the executor's sandbox: bubblewrap): the child is `file ...args
 * program argv[1..]`, the program resolved as usual. The process's exit is classified (`sandboxDenied`)
 * from its retained output, and `released` is called once the child is gone (or never started).
 */
export interface ProcessWrap {
  file: string;
  args: readonly string[];
  /** A file opened read-only as the child's fd 3 (bubblewrap's `--seccomp 3`), or null. */
  fd3File: string | null;
  /** Nothing to run inside (the profile restricts nothing here): the command runs as usual, still classified. */
  unwrapped?: boolean;
  /**
   * Descriptors made afresh for each spawn of this wrap (the managed proxy's relay channel); `args` names
   * each by `inheritedFdArg(i)` (wrap-fds.ts), replaced by the number the child has it at. The spawner owns
   * what this returns from the call: it hands them to that one child only and closes its copies as soon as
   * the child has them (or the spawn failed).
   */
  inheritFds?: (() => number[]) | undefined;
  classifyExit(exitCode: number, output: Iterable<Buffer>): boolean;
  released(): void;
}

/** What `start` resolves with once the child runs. */
export interface StartResult {
  processId: string;
  /** OS pid of the direct child; it leads its own process group (pgid = pid). */
  pid: number;
}

export type ProcessEvent =
  | { kind: 'output'; processId: string; seq: number; stream: OutputStream; chunk: Buffer }
  | { kind: 'exited'; processId: string; seq: number; exitCode: number; sandboxDenied: boolean }
  | { kind: 'closed'; processId: string; seq: number };

export interface ReadOptions {
  afterSeq?: number | null;
  maxBytes?: number | null;
  waitMs?: number | null;
  /** Aborts a long poll early (connection gone, session taken over); the read then rejects with the signal's reason. */
  signal?: AbortSignal;
}

export interface RetainedChunk {
  seq: number;
  stream: OutputStream;
  chunk: Buffer;
}

export interface ReadResult {
  chunks: RetainedChunk[];
  nextSeq: number;
  exited: boolean;
  exitCode: number | null;
  closed: boolean;
  /** The exit looks like the sandbox's doing (a wrapped process only; see ProcessWrap). */
  sandboxDenied: boolean;
}

export interface ProcessSummary {
  processId: string;
  state: 'starting' | 'running' | 'exited' | 'closed';
  pid: number | null;
  argv: string[];
  tty: boolean;
  exitCode: number | null;
  nextSeq: number;
  startedAtMs: number;
}

export interface ProcessTableOptions {
  /** Called synchronously for every event, in seq order per process. */
  onEvent?: (event: ProcessEvent) => void;
  /** Retained output per process (oldest chunks dropped first). Default 1 MiB. */
  retainedOutputBytes?: number;
  /** Retained chunks per process. Default 50 000. */
  retainedOutputChunks?: number;
  /** How long a closed process stays readable before its id is evicted and reusable. Default 30 000 ms. */
  exitedRetentionMs?: number;
  /** Remembered writeIds per process for dedupe. Default 4096. */
  writeIdMemory?: number;
  /**
   * Bytes handed to one child's stdin and not yet consumed. A write that does not fit waits (in order)
   * until the child reads; writes beyond a second such budget of waiting bytes fail with `write_failed`.
   * Default 1 MiB.
   */
  stdinQueueBytes?: number;
  /** Most processes (any state) in one table; a start beyond it fails with `too_many_processes`. Default 1024. */
  maxProcesses?: number;
  /** Kills registered process groups when the owning process dies, even by SIGKILL. */
  reaper?: Reaper | null;
  /**
   * The orphan adopter of the process (`createReaper({ subreaper: true }).adopter`), from whoever creates
   * the table: every child is noted in it as this process's own, so that adoption never takes one for an
   * orphan. Default none (nothing adopts).
   */
  adopter?: ChildLedger | null;
  /**
   * Read children's pipes into these reusable buffers (shared by every table that gets the same pool).
   * Output chunks are then recycled once retention drops them: every chunk of an event or a read result
   * must be consumed (copied, encoded) before control returns to the event loop. Default: none, every read
   * gets a fresh buffer that stays valid for as long as it is referenced.
   */
  readBuffers?: ReadBufferPool | null;
  /**
   * Raises the pipes of children's bulk output (reads that fill a buffer) and bulk stdin (large writes) past
   * Linux's 64 KiB, within its budget (shared by every table given the same one); with `readBuffers`, a
   * raised pipe's reads go into the pool's bulk buffers. Default: none, pipes keep their size.
   */
  pipeGrowth?: PipeGrowth | null;
  /**
   * Bounds the unacknowledged output of flow-controlled processes across every table given the same
   * budget (an executor's): each may hold at most its window or its fair share (OutputBudget).
   * Default: none, each process is bounded by its window alone.
   */
  outputBudget?: OutputBudget | null;
}

/** Stable codes; the executor maps them to JSON-RPC errors in one table. */
export type ProcessErrorCode =
  | 'already_exists'
  | 'unknown_process'
  | 'starting'
  | 'invalid_argument'
  | 'spawn_failed'
  | 'start_cancelled'
  | 'signal_failed'
  | 'write_failed'
  | 'too_many_processes'
  | 'shut_down';

export interface Reaper {
  /** Remember a process group to kill if the owner dies. */
  track(pgid: number): void;
  /** Forget it (the group is gone). */
  untrack(pgid: number): void;
  /**
   * The process leading session `sid` (a table child: its pid) is being killed: kill what escaped its
   * group but is known to have been in its session (adopted orphans, with `subreaper`). Optional.
   */
  killSession?(sid: number): void;
  close(): Promise<void>;
}

/** What a child is started with (spawn.ts). */
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
  /** Raises bulk pipes within its budget (see ProcessTableOptions). */
  pipeGrowth?: PipeGrowth | null | undefined;
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
  /** Stdin is written in large pieces: its pipe may be raised (PipeGrowth; once, pipes only). */
  bulkStdin?(): void;
}
