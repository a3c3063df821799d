/**
 * The process table: caller-chosen id → entry, with the Codex exec-server semantics (spec §3.1–3.5, §5,
 * §6). An entry's state is derived, never stored twice: `starting` until the spawn resolves, then
 * `running`, `exited` (exit known) and `closed` (exit known and every output stream ended), as its
 * OutputLog says. A closed entry stays readable for `exitedRetentionMs`, then its id is free again.
 */

import type { ReadBufferPool } from '@tether/bytes';
import { ProcessError } from './errors.js';
import type { ChildLedger } from './orphans.js';
import type { OutputBudget } from './output-budget.js';
import { OutputLog } from './output-log.js';
import { DEFAULT_PIPE_BYTES, type PipeGrowth } from './pipe-growth.js';
import { type ProcessSink, type SpawnedProcess, spawnProcess } from './spawn.js';
import { checkSize } from './spawn-checks.js';
import { StdinWriter } from './stdin-writer.js';
import type {
  OutputStream,
  ProcessEvent,
  ProcessSummary,
  ProcessTableOptions,
  ReadOptions,
  ReadResult,
  Reaper,
  RecordingSink,
  SignalName,
  StartRequest,
  StartResult,
  WriteStatus,
} from './types.js';

export const DEFAULT_EXITED_RETENTION_MS = 30_000;
/** How long a sandboxed process's trailing output may take to arrive before its exit is classified. */
const SANDBOX_EXIT_GRACE_MS = 20;
export const DEFAULT_WRITE_ID_MEMORY = 4096;
export const DEFAULT_MAX_PROCESSES = 1024;
/**
 * At shutdown, after every direct child is reaped, how long output streams may still drain. A
 * descendant that left the killed group can hold a pipe forever; past this its stream is destroyed.
 */
const SHUTDOWN_STREAM_GRACE_MS = 500;
/** A write this large is bulk stdin (a file piped in): the child's stdin pipe may be raised (PipeGrowth). */
const BULK_STDIN_BYTES = DEFAULT_PIPE_BYTES;
/** The smallest flow window whose process may get raised pipes (and so reads of up to 512 KiB). */
const BULK_FLOW_WINDOW_BYTES = 2 * 1024 * 1024;

const SIGNALS: Readonly<Record<SignalName, NodeJS.Signals>> = {
  interrupt: 'SIGINT',
  terminate: 'SIGTERM',
  kill: 'SIGKILL',
  hangup: 'SIGHUP',
  quit: 'SIGQUIT',
  user1: 'SIGUSR1',
  user2: 'SIGUSR2',
};

interface Entry {
  readonly processId: string;
  readonly argv: string[];
  readonly tty: boolean;
  readonly startedAtMs: number;
  readonly log: OutputLog;
  readonly recording: RecordingSink | null;
  /** null while starting. */
  handle: SpawnedProcess | null;
  /** null when stdin is /dev/null. */
  stdin: StdinWriter | null;
  /** Set when the entry was removed while starting (terminate, shutdown): the start then fails. */
  cancelled: boolean;
  /** Flow control: the client's window (or its share of the budget) is used up, so the output is not read. */
  flowPaused: boolean;
  /** Gives back this process's share of the output budget (flow-controlled processes, until closed). */
  leaveBudget: (() => void) | null;
  /** Accepted writeIds, oldest first (a Set iterates in insertion order). */
  readonly writeIds: Set<string>;
  evictionTimer: NodeJS.Timeout | undefined;
  /** A wrapped process exited: records the exit once its streams end (or its grace time is over). */
  recordExit: (() => void) | null;
  readonly whenClosed: Promise<void>;
  markClosed: () => void;
}

export class ProcessTable {
  readonly #entries = new Map<string, Entry>();
  /** Spawned children not yet reaped, including those of cancelled starts (shutdown waits for them). */
  readonly #live = new Set<SpawnedProcess>();
  readonly #pendingStarts = new Set<Promise<unknown>>();
  /** pgids registered with the reaper, counted (a pgid can recur once its group is gone). */
  readonly #tracked = new Map<number, number>();
  readonly #onEvent: ((event: ProcessEvent) => void) | undefined;
  readonly #retainedOutputBytes: number | undefined;
  readonly #retainedOutputChunks: number | undefined;
  readonly #exitedRetentionMs: number;
  readonly #writeIdMemory: number;
  readonly #maxProcesses: number;
  readonly #stdinQueueBytes: number | undefined;
  readonly #reaper: Reaper | null;
  readonly #readBuffers: ReadBufferPool | null;
  readonly #pipeGrowth: PipeGrowth | null;
  readonly #adopter: ChildLedger | null;
  readonly #outputBudget: OutputBudget | null;
  readonly #stopWatchingBudget: (() => void) | null;
  #shutdown: Promise<void> | null = null;
  /** Output reading is paused for every process (the consumer of events is congested). */
  #outputPaused = false;
  /** Shutdown has begun: every stream is read to its end. */
  #draining = false;

  constructor(options: ProcessTableOptions = {}) {
    this.#onEvent = options.onEvent;
    this.#retainedOutputBytes = options.retainedOutputBytes;
    this.#retainedOutputChunks = options.retainedOutputChunks;
    this.#exitedRetentionMs = options.exitedRetentionMs ?? DEFAULT_EXITED_RETENTION_MS;
    this.#writeIdMemory = options.writeIdMemory ?? DEFAULT_WRITE_ID_MEMORY;
    this.#maxProcesses = options.maxProcesses ?? DEFAULT_MAX_PROCESSES;
    this.#stdinQueueBytes = options.stdinQueueBytes;
    this.#reaper = options.reaper ?? null;
    this.#readBuffers = options.readBuffers ?? null;
    this.#pipeGrowth = options.pipeGrowth ?? null;
    this.#adopter = options.adopter ?? null;
    this.#outputBudget = options.outputBudget ?? null;
    // Another table's process closed: shares grew, so this table's paused processes may go on.
    this.#stopWatchingBudget =
      this.#outputBudget?.onLoosened(() => {
        for (const entry of this.#entries.values()) this.#recheckFlow(entry);
      }) ?? null;
  }

  /**
   * Reserves the id (synchronously, so a concurrent duplicate fails with `already_exists`), spawns, and
   * resolves once the child runs. A failed spawn releases the id; a terminate or shutdown meanwhile kills
   * the new child and fails the start with `start_cancelled`.
   */
  async start(request: StartRequest): Promise<StartResult> {
    const { processId } = request;
    if (this.#shutdown !== null) throw new ProcessError('shut_down', 'the process table has been shut down');
    if (request.argv.length === 0) throw new ProcessError('invalid_argument', 'argv must not be empty');
    if (this.#entries.has(processId)) {
      throw new ProcessError('already_exists', `process ${processId} already exists`);
    }
    if (this.#entries.size >= this.#maxProcesses) {
      throw new ProcessError('too_many_processes', `too many processes: the limit is ${this.#maxProcesses}`);
    }
    const entry = this.#reserve(request);
    const started = this.#spawn(entry, request);
    this.#pendingStarts.add(started);
    try {
      return await started;
    } finally {
      this.#pendingStarts.delete(started);
    }
  }

  /** `process/read` (spec §4.3). */
  read(processId: string, options?: ReadOptions): Promise<ReadResult> {
    try {
      return this.#running(processId).log.read(options);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * Flow control: the client consumed every event of `processId` up to `seq`. Frees that output and,
   * when the window has room again, reads the child again. Unknown ids and processes started without
   * flow control are ignored (an acknowledgement may cross the process's eviction).
   */
  ack(processId: string, seq: number): void {
    const entry = this.#entries.get(processId);
    if (entry === undefined || !entry.log.ack(seq)) return;
    this.#recheckFlow(entry);
  }

  /**
   * `process/write` in the spec §5 decision order. `writeId` null/undefined is tolerated and not
   * deduplicated. Resolves `accepted` once the bytes are queued to the child (see StdinWriter for the
   * bound); rejects with `write_failed` when the child's stdin is gone. `release` (the chunk's pooled memory)
   * is called once nothing reads the chunk any more: written, refused or dropped.
   */
  async write(
    processId: string,
    chunk: Buffer,
    writeId?: string | null,
    release?: () => void,
    from = 'local',
  ): Promise<WriteStatus> {
    const status = this.#refusal(processId, writeId);
    if (status !== null) {
      release?.();
      if (status instanceof ProcessError) throw status;
      return status;
    }
    const entry = this.#entries.get(processId)!;
    if (writeId != null) this.#rememberWriteId(entry, writeId);
    // Recorded as accepted (before the child has read it: the recording's order is the order it was given).
    entry.recording?.input(chunk, from);
    if (chunk.length >= BULK_STDIN_BYTES) entry.handle?.bulkStdin?.();
    try {
      await entry.stdin!.write(chunk, release);
    } catch (err) {
      if (writeId != null) entry.writeIds.delete(writeId);
      throw err;
    }
    return 'accepted';
  }

  /** Why a write to `processId` is not made (the spec's decision order up to the write), or null: make it. */
  #refusal(processId: string, writeId: string | null | undefined): WriteStatus | ProcessError | null {
    if (writeId === '') return new ProcessError('invalid_argument', 'writeId must not be empty');
    const entry = this.#entries.get(processId);
    if (entry === undefined) return 'unknownProcess';
    if (entry.handle === null) return 'starting';
    if (entry.stdin === null) return 'stdinClosed';
    if (writeId != null && entry.writeIds.has(writeId)) return 'accepted';
    if (entry.stdin.ending) return 'stdinClosed';
    return null;
  }

  /** Closes a pipe child's stdin once queued writes are handed over; later writes report `stdinClosed`. */
  closeStdin(processId: string): WriteStatus {
    const entry = this.#entries.get(processId);
    if (entry === undefined) return 'unknownProcess';
    if (entry.handle === null) return 'starting';
    if (entry.tty) {
      throw new ProcessError('invalid_argument', `process ${processId} is a tty: write ^D (0x04) to end its input`);
    }
    if (entry.stdin === null || entry.stdin.ending || entry.stdin.broken) return 'stdinClosed';
    entry.stdin.end();
    return 'accepted';
  }

  /** `process/signal`: to the child's process group; a no-op for unknown, starting or exited processes. */
  signal(processId: string, signal: SignalName): void {
    if (!Object.hasOwn(SIGNALS, signal)) throw new ProcessError('invalid_argument', `unknown signal ${signal}`);
    const entry = this.#entries.get(processId);
    if (entry?.handle == null || entry.log.exited) return;
    try {
      entry.handle.signalGroup(SIGNALS[signal]);
    } catch (err) {
      throw new ProcessError('signal_failed', `failed to signal process: ${(err as Error).message}`, { cause: err });
    }
  }

  /**
   * `process/terminate` (spec §6): a running process gets SIGKILL on its whole group (`running: true`,
   * exit and close follow); a starting one is cancelled (`running: true`); exited or unknown → false.
   */
  terminate(processId: string): { running: boolean } {
    const entry = this.#entries.get(processId);
    if (entry === undefined) return { running: false };
    if (entry.handle === null) {
      this.#cancel(entry);
      return { running: true };
    }
    if (entry.log.exited) return { running: false };
    this.#kill(entry.handle);
    return { running: true };
  }

  /** PTY size change; `invalid_argument` for a pipe process. A no-op once the terminal is gone. */
  resize(processId: string, rows: number, cols: number): void {
    const entry = this.#running(processId);
    if (!entry.tty) throw new ProcessError('invalid_argument', `process ${processId} is not a tty`);
    checkSize({ rows, cols });
    entry.handle!.resize({ rows, cols });
    entry.recording?.resize(rows, cols);
  }

  /** Whether `processId` names an entry, in any state (starting, running, or closed and still retained). */
  has(processId: string): boolean {
    return this.#entries.has(processId);
  }

  /** Entries in the table, in any state (what `maxProcesses` bounds). */
  get size(): number {
    return this.#entries.size;
  }

  /**
   * Backpressure from the event consumer: stop reading every child's output (new children start
   * paused) until `resumeOutput()`. Children then block on write once their pipe or PTY buffer is full,
   * instead of output piling up or being dropped by retention. Idempotent.
   */
  pauseOutput(): void {
    this.#setOutputPaused(true);
  }

  /** Reads output again after `pauseOutput()`. Idempotent. */
  resumeOutput(): void {
    this.#setOutputPaused(false);
  }

  list(): ProcessSummary[] {
    return [...this.#entries.values()].map((entry) => ({
      processId: entry.processId,
      state: stateOf(entry),
      pid: entry.handle?.pid ?? null,
      argv: [...entry.argv],
      tty: entry.tty,
      exitCode: entry.log.exitCode,
      nextSeq: entry.log.nextSeq,
      startedAtMs: entry.startedAtMs,
    }));
  }

  /**
   * Kills every process group (and cancels pending starts), waits until every child is reaped and its
   * output has ended, and clears all timers. Idempotent; `start` fails with `shut_down` afterwards.
   * Entries stay readable.
   */
  shutdown(): Promise<void> {
    this.#shutdown ??= this.#shutDown();
    return this.#shutdown;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.shutdown();
  }

  async #shutDown(): Promise<void> {
    // A paused stream would never see its EOF: from here on #applyPause pauses nothing.
    this.#draining = true;
    this.#setOutputPaused(false);
    for (const entry of this.#entries.values()) this.#applyPause(entry);
    const entries = [...this.#entries.values()];
    for (const entry of entries) {
      if (entry.handle === null) this.#cancel(entry);
      else if (!entry.log.closed) this.#kill(entry.handle, true);
    }
    // Cancelled starts kill their own child once the spawn resolves.
    await Promise.allSettled([...this.#pendingStarts]);
    await Promise.all([...this.#live].map((handle) => handle.exited));

    const open = entries.filter((entry) => entry.handle !== null && !entry.log.closed);
    if (open.length > 0) {
      let timer: NodeJS.Timeout | undefined;
      const grace = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, SHUTDOWN_STREAM_GRACE_MS);
      });
      await Promise.race([Promise.all(open.map((entry) => entry.whenClosed)), grace]);
      clearTimeout(timer);
      for (const entry of open) if (!entry.log.closed) entry.handle!.destroyStreams();
      await Promise.all(open.map((entry) => entry.whenClosed));
    }

    for (const entry of this.#entries.values()) {
      clearTimeout(entry.evictionTimer);
      entry.evictionTimer = undefined;
      entry.stdin?.destroy();
      this.#leaveBudget(entry);
    }
    this.#stopWatchingBudget?.();
    for (const [pgid, count] of this.#tracked) for (let i = 0; i < count; i++) this.#reaper?.untrack(pgid);
    this.#tracked.clear();
  }

  #reserve(request: StartRequest): Entry {
    let markClosed!: () => void;
    const whenClosed = new Promise<void>((resolve) => {
      markClosed = resolve;
    });
    const entry: Entry = {
      processId: request.processId,
      argv: [...request.argv],
      tty: request.tty,
      startedAtMs: Date.now(),
      recording: request.recording ?? null,
      log: new OutputLog({
        processId: request.processId,
        streams: request.tty ? ['pty'] : ['stdout', 'stderr'],
        maxBytes: this.#retainedOutputBytes,
        maxChunks: this.#retainedOutputChunks,
        onEvent: this.#onEvent,
        onDrop: this.#readBuffers === null ? undefined : (chunk) => this.#readBuffers?.release(chunk),
        flowWindowBytes: request.flowWindowBytes,
      }),
      handle: null,
      stdin: null,
      cancelled: false,
      flowPaused: false,
      leaveBudget: null,
      writeIds: new Set(),
      evictionTimer: undefined,
      recordExit: null,
      whenClosed,
      markClosed,
    };
    this.#entries.set(request.processId, entry);
    return entry;
  }

  async #spawn(entry: Entry, request: StartRequest): Promise<StartResult> {
    const sink: ProcessSink = {
      output: (stream: OutputStream, chunk: Buffer) => {
        if (entry.cancelled) return;
        entry.recording?.output(stream, chunk);
        entry.log.append(stream, chunk);
        if (!entry.flowPaused && this.#flowBlocked(entry)) {
          entry.flowPaused = true;
          this.#applyPause(entry);
        }
      },
      streamEnd: (stream: OutputStream) => {
        if (entry.cancelled) return;
        entry.log.endStream(stream);
        if (entry.recordExit !== null && entry.log.streamsEnded) entry.recordExit();
        this.#afterChange(entry);
      },
      exit: (exitCode: number) => {
        if (entry.cancelled) return;
        const wrap = request.wrap;
        if (wrap == null) {
          entry.log.exit(exitCode);
          this.#afterChange(entry);
          return;
        }
        // As Codex does for a sandboxed process: the output still in the pipes (a denied write's message)
        // gets up to 20 ms to arrive, then the exit is classified from what is retained.
        const record = () => {
          clearTimeout(timer);
          entry.recordExit = null;
          if (entry.log.exited) return;
          entry.log.exit(exitCode, wrap.classifyExit(exitCode, entry.log.retainedOutput()));
          this.#afterChange(entry);
        };
        const timer = setTimeout(record, SANDBOX_EXIT_GRACE_MS);
        entry.recordExit = record;
        if (entry.log.streamsEnded) record();
      },
    };
    let handle: SpawnedProcess;
    try {
      handle = await spawnProcess(
        {
          argv: request.argv,
          cwd: request.cwd,
          env: request.env,
          tty: request.tty,
          pipeStdin: request.pipeStdin,
          arg0: request.arg0,
          size: request.size,
          serverPath: process.env.PATH,
          readBuffers: this.#readBuffers,
          // A bulk read may pass the flow window by one read: only a window of several such reads gets them.
          pipeGrowth:
            request.flowWindowBytes == null || request.flowWindowBytes >= BULK_FLOW_WINDOW_BYTES
              ? this.#pipeGrowth
              : null,
          wrap: request.wrap ?? null,
          adopter: this.#adopter,
        },
        sink,
      );
    } catch (err) {
      if (this.#entries.get(entry.processId) === entry) this.#entries.delete(entry.processId);
      request.wrap?.released();
      entry.recording?.close();
      throw err;
    }

    this.#live.add(handle);
    if (request.wrap != null) {
      const wrap = request.wrap;
      void handle.exited.then(() => wrap.released());
    }
    this.#track(handle.pid);
    void handle.exited.then(() => this.#live.delete(handle));
    if (entry.cancelled) {
      entry.recording?.close();
      this.#kill(handle, true);
      void handle.exited.then(() => this.#untrack(handle.pid));
      throw new ProcessError('start_cancelled', `process ${entry.processId} start was cancelled`);
    }
    entry.handle = handle;
    if (this.#outputBudget !== null && entry.log.flowWindowBytes !== null)
      entry.leaveBudget = this.#outputBudget.join();
    this.#applyPause(entry);
    // A tty always takes input through the PTY master; a pipe child only with pipeStdin.
    if (handle.stdin !== null) entry.stdin = new StdinWriter(handle.stdin, this.#stdinQueueBytes);
    this.#afterChange(entry);
    return { processId: entry.processId, pid: handle.pid };
  }

  #setOutputPaused(paused: boolean): void {
    if (this.#outputPaused === paused) return;
    this.#outputPaused = paused;
    for (const entry of this.#entries.values()) this.#applyPause(entry);
  }

  /** Flow control: the process's window, or its share of the output budget, is unacknowledged. */
  #flowBlocked(entry: Entry): boolean {
    return entry.log.flowBlocked(this.#outputBudget?.share);
  }

  /** Reads a flow-paused child again once what holds it back has room. */
  #recheckFlow(entry: Entry): void {
    if (!entry.flowPaused || this.#flowBlocked(entry)) return;
    entry.flowPaused = false;
    this.#applyPause(entry);
  }

  /** Gives back an entry's share of the output budget (once). */
  #leaveBudget(entry: Entry): void {
    const leave = entry.leaveBudget;
    entry.leaveBudget = null;
    leave?.();
  }

  /** Reads a child's output only while neither the event consumer nor its flow window holds it back. */
  #applyPause(entry: Entry): void {
    // At shutdown every stream must reach its EOF, whatever is unacknowledged.
    const paused = !this.#draining && (this.#outputPaused || entry.flowPaused);
    entry.handle?.pauseOutput(paused);
  }

  /** Called after exit or a stream end: a newly closed entry starts its retention clock (spec §4.2). */
  #afterChange(entry: Entry): void {
    if (!entry.log.closed || entry.handle === null || entry.evictionTimer !== undefined) return;
    // The exit is recorded after the last output (streams may end after the exit itself).
    entry.recording?.exit(entry.log.exitCode ?? -1);
    entry.recording?.close();
    entry.markClosed();
    // Closed: nothing more will be read, so its share goes to the others.
    this.#leaveBudget(entry);
    if (this.#shutdown !== null) return;
    entry.evictionTimer = setTimeout(() => this.#evict(entry), this.#exitedRetentionMs);
    entry.evictionTimer.unref();
  }

  #evict(entry: Entry): void {
    entry.evictionTimer = undefined;
    if (this.#entries.get(entry.processId) === entry) this.#entries.delete(entry.processId);
    entry.stdin?.destroy();
    if (entry.handle !== null) this.#untrack(entry.handle.pid);
  }

  #cancel(entry: Entry): void {
    entry.cancelled = true;
    if (this.#entries.get(entry.processId) === entry) this.#entries.delete(entry.processId);
  }

  /**
   * SIGKILL to the group, the direct child and every descendant that left the group (setsid), and the
   * reaper's adopted orphans from its session. During shutdown a failure must not stop the others.
   */
  #kill(handle: SpawnedProcess, ignoreErrors = false): void {
    try {
      handle.kill();
      this.#reaper?.killSession?.(handle.pid);
    } catch (err) {
      if (ignoreErrors) return;
      throw new ProcessError('signal_failed', `failed to signal process: ${(err as Error).message}`, { cause: err });
    }
  }

  /** Looks up an entry whose child runs (any state after starting); errors as in spec §3.2. */
  #running(processId: string): Entry {
    const entry = this.#entries.get(processId);
    if (entry === undefined) throw new ProcessError('unknown_process', `unknown process id ${processId}`);
    if (entry.handle === null) throw new ProcessError('starting', `process id ${processId} is starting`);
    return entry;
  }

  #rememberWriteId(entry: Entry, writeId: string): void {
    entry.writeIds.add(writeId);
    if (entry.writeIds.size > this.#writeIdMemory) {
      entry.writeIds.delete(entry.writeIds.values().next().value!);
    }
  }

  #track(pgid: number): void {
    if (this.#reaper === null) return;
    this.#tracked.set(pgid, (this.#tracked.get(pgid) ?? 0) + 1);
    this.#reaper.track(pgid);
  }

  #untrack(pgid: number): void {
    const count = this.#tracked.get(pgid);
    if (count === undefined) return;
    if (count > 1) this.#tracked.set(pgid, count - 1);
    else this.#tracked.delete(pgid);
    this.#reaper?.untrack(pgid);
  }
}

function stateOf(entry: Entry): ProcessSummary['state'] {
  if (entry.handle === null) return 'starting';
  if (entry.log.closed) return 'closed';
  if (entry.log.exited) return 'exited';
  return 'running';
}
