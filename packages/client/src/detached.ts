/**
 * Detached processes (capability `processDetach`, exec-protocol's detached.ts): processes that belong to
 * the executor instead of the session that started them. They outlive every session, until they exit
 * (then they stay readable for the executor's retention, 10 minutes by default), within the executor's
 * `--max-detached-processes`. Any session can list them, attach to them (several at once), write to their
 * stdin, resize their terminal and signal them.
 *
 * Environment's `spawnDetached`, `listProcesses`, `attach` and `kill` are thin members over this file.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import {
  detachedProcessIdProblem,
  Method,
  PROCESS_DETACH_CAPABILITY,
  type ProcessAttachResult,
} from '@tether/exec-protocol';
import type { OutputStream, ProcessEvent, SignalName, WriteStatus } from './backend.js';
import { TetherError } from './errors.js';
import { type ExecServerClient, processStartParams } from './exec-client.js';
import type { ProcessResult } from './process.js';

/** One process as `process/list` shows it. */
export interface ProcessInfo {
  processId: string;
  state: 'starting' | 'running' | 'exited' | 'closed';
  /** OS pid on the executor's host (null while starting). */
  pid: number | null;
  argv: string[];
  tty: boolean;
  exitCode: number | null;
  /** The next seq the process will use (what was produced so far, output and events). */
  nextSeq: number;
  startedAtMs: number;
  /** Belongs to the executor (started detached) rather than to this session. */
  detached: boolean;
}

export interface SpawnDetachedOptions {
  /** Absolute path on the executor; default `/`. */
  cwd?: string;
  /** Variables added over the executor's own environment, or the exact environment with `inheritEnv: false`. */
  env?: Record<string, string>;
  inheritEnv?: boolean;
  tty?: boolean;
  /** Keep stdin open, for `attach` to write to later (always true with a tty). */
  stdin?: boolean;
  arg0?: string;
  /** Terminal size at start (tty only). */
  size?: { rows: number; cols: number };
  /** 1–64 of A-Z a-z 0-9 . _ - ; unique on the executor. Default: 8 random hex digits. */
  processId?: string;
}

export interface AttachOptions {
  /**
   * Replay the output the executor still retains before following (default true); false follows from
   * what comes next.
   */
  replay?: boolean;
  /**
   * Output the executor no longer retained when it was read (a replay of more than its retention, or an
   * attacher that fell behind a fast process): seqs `first`..`last` are missing. Not an error: a detached
   * process never waits for its readers.
   */
  onGap?: (first: number, last: number) => void;
  /** Undelivered bytes above which pushed output is left to be read at the consumer's pace. Default 512 KiB. */
  highWaterBytes?: number;
}

/** Most entries a `process/list` answer may have (the executor's limits are far below). */
const MAX_LISTED_PROCESSES = 100_000;
/** Bytes asked per `process/read`. */
const READ_MAX_BYTES = 1024 * 1024;
const DEFAULT_HIGH_WATER_BYTES = 512 * 1024;
/**
 * A quiet attachment reads once in a while: a notification dropped while the connection was congested, with
 * nothing after it, would otherwise go unnoticed. From 1 s, doubling to 8 s while nothing comes.
 */
const IDLE_READ_FIRST_MS = 1000;
const IDLE_READ_MAX_MS = 8000;

/** Throws unless `client` is an executor that offers detached processes. */
export function requireDetach(client: ExecServerClient | null): ExecServerClient {
  if (client === null) {
    throw new TetherError('invalid_state', 'detached processes need a remote executor; a local environment has none');
  }
  if (!client.capabilities.has(PROCESS_DETACH_CAPABILITY)) {
    throw new TetherError(
      'invalid_state',
      `this executor does not offer detached processes (capability ${PROCESS_DETACH_CAPABILITY}; codex exec-server and older executors do not): run the command attached instead`,
    );
  }
  return client;
}

/** Starts a detached process; resolves with its id once it runs. */
export async function spawnDetached(
  client: ExecServerClient | null,
  argv: string[],
  options: SpawnDetachedOptions = {},
): Promise<{ processId: string }> {
  const executor = requireDetach(client);
  if (argv.length === 0) throw new TetherError('invalid_argument', 'argv must not be empty');
  const processId = options.processId ?? randomBytes(4).toString('hex');
  const problem = detachedProcessIdProblem(processId);
  if (problem !== null) throw new TetherError('invalid_argument', problem);
  const params = {
    ...processStartParams({
      processId,
      argv,
      cwd: options.cwd ?? '/',
      env: options.env ?? {},
      inheritEnv: options.inheritEnv ?? true,
      tty: options.tty ?? false,
      pipeStdin: options.stdin ?? false,
      arg0: options.arg0 ?? null,
      size: options.size ?? null,
    }),
    detached: true,
  };
  const answer = await executor.call(Method.processStart, params);
  // An executor that ignored the flag started a process bound to this session: it would die with it.
  if (answer.detached !== true) {
    await executor.call(Method.processTerminate, { processId }).catch(() => undefined);
    throw new TetherError('protocol', 'the executor did not start the process detached');
  }
  return { processId };
}

/** `process/list`: this session's processes and the executor's detached ones, checked (the executor is untrusted). */
export async function listProcesses(client: ExecServerClient | null): Promise<ProcessInfo[]> {
  const executor = requireDetach(client);
  const list = await executor.call(Method.processList, {});
  if (list.processes.length > MAX_LISTED_PROCESSES) {
    throw new TetherError(
      'protocol',
      `the executor listed ${list.processes.length} processes; at most ${MAX_LISTED_PROCESSES} are accepted`,
    );
  }
  return list.processes.map((entry) => ({ ...entry, detached: entry.detached === true }));
}

/**
 * Signals a detached (or this session's) process. `process/signal` is silent for an unknown or ended process,
 * so the list is asked first: those are errors here.
 */
export async function killProcess(
  client: ExecServerClient | null,
  processId: string,
  signal: SignalName = 'terminate',
): Promise<void> {
  const executor = requireDetach(client);
  const found = (await listProcesses(executor)).find((entry) => entry.processId === processId);
  if (found === undefined) throw new TetherError('invalid_state', `unknown process id ${processId}`);
  if (found.state === 'exited' || found.state === 'closed') {
    throw new TetherError('invalid_state', `process ${processId} has already exited (exit code ${found.exitCode})`);
  }
  await executor.call(Method.processSignal, { processId, signal });
}

/** Follows a detached process: replays what is retained, then its output as it comes, to its end. */
export async function attachProcess(
  client: ExecServerClient | null,
  processId: string,
  options: AttachOptions = {},
): Promise<AttachedProcess> {
  const executor = requireDetach(client);
  // Listening before asking: the first notifications can come before the answer.
  const attached = new AttachedProcess(processId, executor, options);
  try {
    let info: ProcessAttachResult;
    try {
      info = await executor.call(Method.processAttach, { processId });
    } catch (err) {
      // The executor's message says which id (unknown process id …).
      throw err instanceof TetherError && err.code === 'rpc'
        ? new TetherError('invalid_state', err.message.replace(/^process\/attach: /, ''), {
            cause: err,
            ...(err.rpcCode === undefined ? {} : { rpcCode: err.rpcCode }),
          })
        : err;
    }
    if (info.processId !== processId) throw new TetherError('protocol', 'process/attach answered for another process');
    attached.begin({ ...info, detached: info.detached === true }, options.replay ?? true);
  } catch (err) {
    attached.dispose();
    throw err;
  }
  return attached;
}

/**
 * An attachment to a detached process: the same surface as a spawned ProcessHandle (events in seq order,
 * `completion`, stdin, resize, signals). Events come as pushed notifications while they continue the
 * sequence and the consumer keeps up; otherwise, and for the replay, they are read (`process/read`), so
 * memory stays bounded by the high-water mark and one read. Output the executor dropped before it could be
 * read is skipped (`onGap`), since a detached process never waits for its readers.
 */
export class AttachedProcess implements AsyncIterable<ProcessEvent> {
  readonly completion: Promise<ProcessResult>;
  /** The process when it was attached (null until then). */
  info: ProcessInfo | null = null;
  /** Seqs skipped because the executor no longer retained them. */
  lostSeqs = 0;
  /** Highest seq delivered (or skipped). */
  private cursor = 0;
  private readonly queue: ProcessEvent[] = [];
  private queuedBytes = 0;
  private readonly highWater: number;
  private exitCode: number | null = null;
  private ended = false;
  private settled = false;
  private iterating = false;
  private abandoned = false;
  private failure: Error | null = null;
  private began = false;
  /** A read loop runs; pushed events are kept aside meanwhile (bounded), to continue after it. */
  private reading = false;
  private readAgain = false;
  private aside: ProcessEvent[] = [];
  private asideBytes = 0;
  private asideOverflowed = false;
  private idleTimer: NodeJS.Timeout | null = null;
  private idleDelay = IDLE_READ_FIRST_MS;
  /** Something was pushed since the idle timer was set: no read is due yet. */
  private active = false;
  private wakeConsumer: (() => void) | null = null;
  private wakeReader: (() => void) | null = null;
  private resolveCompletion!: (result: ProcessResult) => void;
  private rejectCompletion!: (error: Error) => void;
  private readonly unsubscribe: Array<() => void> = [];
  private readonly writePrefix = randomUUID();
  private writeCounter = 0;

  constructor(
    readonly processId: string,
    private readonly client: ExecServerClient,
    private readonly options: AttachOptions = {},
  ) {
    this.highWater = options.highWaterBytes ?? DEFAULT_HIGH_WATER_BYTES;
    this.completion = new Promise<ProcessResult>((resolve, reject) => {
      this.resolveCompletion = resolve;
      this.rejectCompletion = reject;
    });
    this.completion.catch(() => undefined);
    this.unsubscribe.push(
      client.subscribe((event) => {
        if (event.processId === this.processId) this.onPushed(event);
      }),
      // Notifications were lost with the connection: read what was missed.
      client.onReconnect(() => this.read()),
      client.onClosed((error) => this.fail(error)),
    );
  }

  /** @internal The attach was answered: start with the replay (or at the current end). */
  begin(info: ProcessInfo, replay: boolean): void {
    this.info = info;
    this.began = true;
    if (!replay) this.cursor = Math.max(0, info.nextSeq - 1);
    this.read();
  }

  get bufferedBytes(): number {
    return this.queuedBytes;
  }

  /** Writes to the process's stdin (a tty, or a process started with `stdin`). */
  write(data: string | Buffer): Promise<WriteStatus> {
    const chunk = typeof data === 'string' ? Buffer.from(data) : data;
    return this.client.write(this.processId, chunk, `${this.writePrefix}-${++this.writeCounter}`);
  }

  closeStdin(): Promise<WriteStatus> {
    return this.client.closeStdin(this.processId);
  }

  signal(signal: SignalName = 'interrupt'): Promise<void> {
    return this.client.signal(this.processId, signal);
  }

  terminate(): Promise<void> {
    return this.client.terminate(this.processId);
  }

  resize(rows: number, cols: number): Promise<void> {
    return this.client.resize(this.processId, rows, cols);
  }

  [Symbol.asyncIterator](): AsyncIterator<ProcessEvent> {
    if (this.iterating)
      throw new TetherError('invalid_state', `the events of ${this.processId} are already being read`);
    this.iterating = true;
    return {
      next: () => this.next(),
      return: async () => {
        this.abandon();
        return { done: true, value: undefined };
      },
    };
  }

  /** Resolves with the exit status; output nobody iterates is read and discarded. */
  wait(): Promise<ProcessResult> {
    if (!this.iterating) {
      this.iterating = true;
      this.abandon();
    }
    return this.completion;
  }

  /** Consumes everything; resolves with the exit code and the output by stream. */
  async collect(): Promise<ProcessResult & { stdout: Buffer; stderr: Buffer; pty: Buffer }> {
    const parts: Record<OutputStream, Buffer[]> = { stdout: [], stderr: [], pty: [] };
    for await (const event of this) if (event.kind === 'output') parts[event.stream].push(event.chunk);
    const result = await this.completion;
    return {
      ...result,
      stdout: Buffer.concat(parts.stdout),
      stderr: Buffer.concat(parts.stderr),
      pty: Buffer.concat(parts.pty),
    };
  }

  /**
   * Stops following (the process keeps running; completion rejects if still pending). The executor keeps
   * sending this session's notifications for it until the session ends; they are ignored.
   */
  dispose(): void {
    this.stopListening();
    if (!this.settled) this.fail(new TetherError('closed', `stopped following process ${this.processId}`));
  }

  // Delivery ---------------------------------------------------------------------------------------

  private onPushed(event: ProcessEvent): void {
    if (!this.began || this.ended || event.seq <= this.cursor) return;
    if (this.reading) {
      this.keepAside(event);
      return;
    }
    // A full queue: leave it to a read once the consumer has caught up.
    if (this.queuedBytes > this.highWater) {
      this.readAgain = true;
      return;
    }
    if (event.seq !== this.cursor + 1) {
      // A notification went missing (dropped while the connection was congested): read from the cursor.
      this.read();
      this.keepAside(event);
      return;
    }
    this.deliver(event);
    this.active = true;
  }

  private keepAside(event: ProcessEvent): void {
    const size = event.kind === 'output' ? event.chunk.byteLength : 0;
    if (this.asideBytes + size > this.highWater) {
      this.aside = [];
      this.asideBytes = 0;
      this.asideOverflowed = true;
      return;
    }
    this.aside.push(event);
    this.asideBytes += size;
  }

  private deliver(event: ProcessEvent): void {
    this.cursor = event.seq;
    if (event.kind === 'exited') this.exitCode = event.exitCode;
    this.queue.push(event);
    if (event.kind === 'output') this.queuedBytes += event.chunk.byteLength;
    if (event.kind === 'closed') {
      this.ended = true;
      this.stopListening();
    }
    const wake = this.wakeConsumer;
    this.wakeConsumer = null;
    wake?.();
  }

  private skip(first: number, last: number): void {
    this.lostSeqs += last - first + 1;
    this.cursor = last;
    try {
      this.options.onGap?.(first, last);
    } catch {
      // The callback's failure is not the attachment's.
    }
  }

  /** Starts the read loop, or has the running one read once more. */
  private read(): void {
    if (!this.began || this.ended || this.settled) return;
    if (this.reading) {
      this.readAgain = true;
      return;
    }
    this.reading = true;
    this.readAgain = false;
    if (this.idleTimer !== null) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    this.readLoop().then(
      () => {
        this.reading = false;
        if (!this.ended && !this.settled) this.armIdleRead();
      },
      (err: Error) => {
        this.reading = false;
        this.fail(err);
      },
    );
  }

  private async readLoop(): Promise<void> {
    for (;;) {
      while (this.queuedBytes > this.highWater / 4 && !this.abandoned && !this.settled) {
        await new Promise<void>((resolve) => {
          this.wakeReader = resolve;
        });
      }
      if (this.ended || this.settled) return;
      this.readAgain = false;
      const answer = await this.client.read(this.processId, this.cursor, { maxBytes: READ_MAX_BYTES, waitMs: 0 });
      if (this.ended || this.settled) return;
      if (!Array.isArray(answer.chunks) || !Number.isSafeInteger(answer.nextSeq)) {
        throw new TetherError('protocol', `the executor's process/read answer for ${this.processId} is malformed`);
      }
      for (const chunk of answer.chunks) {
        if (!Number.isSafeInteger(chunk.seq) || chunk.seq <= this.cursor) continue;
        const gap = chunk.seq - this.cursor - 1;
        if (gap === 1 && answer.exited && this.exitCode === null && answer.exitCode !== null) {
          // Output after the exit (a descendant held the pipe): the one missing seq is the exit itself.
          this.deliver({ kind: 'exited', processId: this.processId, seq: this.cursor + 1, exitCode: answer.exitCode });
        } else if (gap > 0) {
          this.skip(this.cursor + 1, chunk.seq - 1);
        }
        this.deliver({
          kind: 'output',
          processId: this.processId,
          seq: chunk.seq,
          stream: chunk.stream,
          chunk: chunk.chunk,
        });
      }
      if (answer.chunks.length > 0) continue;
      if (answer.closed) {
        // Read to the end: the exit and close have the last two seqs the executor handed out.
        const closeSeq = Math.max(this.cursor + 1, answer.nextSeq - 1);
        if (this.exitCode === null) {
          if (answer.exitCode === null)
            throw new TetherError('protocol', `process ${this.processId} closed without an exit status`);
          if (closeSeq - 1 > this.cursor + 1) this.skip(this.cursor + 1, closeSeq - 2);
          this.deliver({
            kind: 'exited',
            processId: this.processId,
            seq: Math.max(this.cursor + 1, closeSeq - 1),
            exitCode: answer.exitCode,
          });
        }
        this.deliver({ kind: 'closed', processId: this.processId, seq: Math.max(this.cursor + 1, closeSeq) });
        return;
      }
      // Caught up with what is retained: continue with what was pushed meanwhile, if it follows on.
      const pending = this.aside.filter((event) => event.seq > this.cursor).sort((a, b) => a.seq - b.seq);
      const overflowed = this.asideOverflowed;
      this.aside = [];
      this.asideBytes = 0;
      this.asideOverflowed = false;
      if (overflowed) continue;
      for (const event of pending) {
        if (event.seq !== this.cursor + 1) {
          this.readAgain = true;
          break;
        }
        this.deliver(event);
        if (this.ended) return;
      }
      if (!this.readAgain) return;
    }
  }

  /** Reads after a quiet while (see IDLE_READ_FIRST_MS); pushed events meanwhile put it off and start the backoff over. */
  private armIdleRead(): void {
    if (this.idleTimer !== null) return;
    this.idleTimer = setTimeout(() => {
      this.idleTimer = null;
      if (this.active) {
        this.active = false;
        this.idleDelay = IDLE_READ_FIRST_MS;
        this.armIdleRead();
        return;
      }
      this.idleDelay = Math.min(this.idleDelay * 2, IDLE_READ_MAX_MS);
      this.read();
    }, this.idleDelay);
    // The attachment's consumer keeps the process alive, not this timer (a web page's timers are numbers).
    (this.idleTimer as { unref?: () => void }).unref?.();
  }

  private async next(): Promise<IteratorResult<ProcessEvent>> {
    for (;;) {
      if (this.abandoned) return { done: true, value: undefined };
      const event = this.queue.shift();
      if (event) {
        if (event.kind === 'output') this.queuedBytes -= event.chunk.byteLength;
        this.consumed();
        if (event.kind === 'closed') this.settle();
        return { done: false, value: event };
      }
      if (this.failure) throw this.failure;
      if (this.settled) return { done: true, value: undefined };
      await new Promise<void>((resolve) => {
        this.wakeConsumer = resolve;
      });
    }
  }

  /** The consumer took something: a reader waiting for room goes on, and what was left for later is read. */
  private consumed(): void {
    if (this.queuedBytes > this.highWater / 4) return;
    const wake = this.wakeReader;
    this.wakeReader = null;
    wake?.();
    if (this.readAgain && !this.reading) this.read();
  }

  private abandon(): void {
    if (this.abandoned) return;
    this.abandoned = true;
    this.queue.length = 0;
    this.queuedBytes = 0;
    if (this.ended) {
      this.settle();
      return;
    }
    const drain = () => {
      this.queue.length = 0;
      this.queuedBytes = 0;
      if (this.ended) this.settle();
      else this.wakeConsumer = drain;
      this.consumed();
    };
    this.wakeConsumer = drain;
    this.consumed();
  }

  private stopListening(): void {
    for (const off of this.unsubscribe.splice(0)) off();
    if (this.idleTimer !== null) clearTimeout(this.idleTimer);
    this.idleTimer = null;
  }

  private settle(): void {
    if (this.settled) return;
    this.settled = true;
    this.stopListening();
    if (this.exitCode === null) {
      this.rejectCompletion(new TetherError('protocol', `process ${this.processId} closed without an exit status`));
    } else {
      this.resolveCompletion({ exitCode: this.exitCode });
    }
  }

  private fail(error: Error): void {
    if (this.settled) return;
    this.failure = error;
    this.settled = true;
    this.stopListening();
    this.rejectCompletion(error);
    const wake = this.wakeConsumer;
    this.wakeConsumer = null;
    wake?.();
    const reader = this.wakeReader;
    this.wakeReader = null;
    reader?.();
  }
}
