import { LOW_WATER_FRACTION } from '@tether/bytes';
import type { OutputStream, ProcessBackend, ProcessEvent, ReadChunk, SignalName, WriteStatus } from './backend.js';
import { TetherError } from './errors.js';

export interface ProcessResult {
  exitCode: number;
}

/**
 * The consumer's side of one process, whoever started it: its events queued in seq order and handed out once
 * (an async iterator, `wait`, `collect`), `completion`, and its controls (stdin, signals, resize). How events
 * reach the queue is the subclass's: a spawned process's handle (ProcessHandle: push, pull on a gap, flow
 * control) or an attachment to a detached one (AttachedProcess: replay, gaps skipped, idle reads). What both
 * share lives here once.
 */
export abstract class ProcessEvents implements AsyncIterable<ProcessEvent> {
  readonly completion: Promise<ProcessResult>;
  /** Highest seq delivered into the queue (or skipped). */
  protected cursor = 0;
  protected readonly queue: ProcessEvent[] = [];
  protected queuedBytes = 0;
  protected readonly highWater: number;
  protected exitCode: number | null = null;
  /** The closed event is in the queue (nothing more will be added). */
  protected ended = false;
  /** The consumer has taken the closed event, gave up the iterator, or the process failed. */
  protected settled = false;
  /** The consumer gave up: what arrives is discarded until the close. */
  protected abandoned = false;
  /** Pushed events kept while reading, to continue with once the reads have caught up (see keepAside). */
  protected aside: ProcessEvent[] = [];
  protected asideBytes = 0;
  protected asideOverflowed = false;
  protected readonly unsubscribe: Array<() => void> = [];
  private iterating = false;
  private failure: Error | null = null;
  private wakeConsumer: (() => void) | null = null;
  private wakeReader: (() => void) | null = null;
  private resolveCompletion!: (result: ProcessResult) => void;
  private rejectCompletion!: (error: Error) => void;
  /** Made on the first write: a process that is never written to does not load the global `crypto` for it. */
  private writePrefix: string | null = null;
  private writeCounter = 0;

  constructor(
    readonly processId: string,
    protected readonly backend: ProcessBackend,
    highWaterBytes: number,
  ) {
    this.highWater = highWaterBytes;
    this.completion = new Promise<ProcessResult>((resolve, reject) => {
      this.resolveCompletion = resolve;
      this.rejectCompletion = reject;
    });
    // Callers that only want the events must not see an unhandled rejection here.
    this.completion.catch(() => undefined);
  }

  /** Bytes of events received but not yet consumed. */
  get bufferedBytes(): number {
    return this.queuedBytes;
  }

  /** Writes to stdin (a tty, or a process started with its stdin open); each call has its own idempotency key. */
  write(data: string | Buffer): Promise<WriteStatus> {
    const chunk = typeof data === 'string' ? Buffer.from(data) : data;
    this.writePrefix ??= crypto.randomUUID();
    return this.backend.write(this.processId, chunk, `${this.writePrefix}-${++this.writeCounter}`);
  }

  closeStdin(): Promise<WriteStatus> {
    return this.backend.closeStdin(this.processId);
  }

  signal(signal: SignalName = 'interrupt'): Promise<void> {
    return this.backend.signal(this.processId, signal);
  }

  terminate(): Promise<void> {
    return this.backend.terminate(this.processId);
  }

  resize(rows: number, cols: number): Promise<void> {
    return this.backend.resize(this.processId, rows, cols);
  }

  /** The events, once, in seq order; `break` gives them up (they are then drained internally). */
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

  /** Stops following the process (it keeps running; its events are dropped; completion rejects if pending). */
  dispose(): void {
    this.stopListening();
    if (!this.settled) this.fail(new TetherError('closed', `stopped following process ${this.processId}`));
  }

  // For the delivery of subclasses --------------------------------------------------------------------

  /** Queues a chunk that `process/read` answered as the output event it is. */
  protected enqueueOutput(chunk: ReadChunk): void {
    this.enqueue({
      kind: 'output',
      processId: this.processId,
      seq: chunk.seq,
      stream: chunk.stream,
      chunk: chunk.chunk,
    });
  }

  /** Queues `event` (the next seq) for the consumer. */
  protected enqueue(event: ProcessEvent): void {
    this.cursor = Math.max(this.cursor, event.seq);
    if (event.kind === 'exited') this.exitCode = event.exitCode;
    if (event.kind === 'closed') {
      this.ended = true;
      this.stopListening();
    }
    this.queue.push(event);
    if (event.kind === 'output') this.queuedBytes += event.chunk.byteLength;
    const wake = this.wakeConsumer;
    this.wakeConsumer = null;
    wake?.();
  }

  /**
   * While reading, pushed events are kept (at most `asideBound()` bytes; past it they are all dropped and
   * `asideOverflowed` says so) so that delivery can go back to pushed events once the reads have caught up.
   */
  protected keepAside(event: ProcessEvent): void {
    const size = event.kind === 'output' ? event.chunk.byteLength : 0;
    if (this.asideBytes + size > this.asideBound()) {
      this.clearAside();
      this.asideOverflowed = true;
      return;
    }
    this.aside.push(event);
    this.asideBytes += size;
  }

  protected asideBound(): number {
    return this.highWater;
  }

  protected clearAside(): void {
    this.aside = [];
    this.asideBytes = 0;
  }

  /** Waits while the consumer has more than the low-water mark to take (reads go at its pace). */
  protected async waitForRoom(): Promise<void> {
    while (this.queuedBytes > this.highWater * LOW_WATER_FRACTION && !this.abandoned && !this.settled) {
      await new Promise<void>((resolve) => {
        this.wakeReader = resolve;
      });
    }
  }

  /** The consumer took `event`, or it was discarded for one that gave up (flow control credits it back). */
  protected took(_event: ProcessEvent): void {}

  /** The queue is below the low-water mark again: a reader waiting for room goes on. */
  protected roomMade(): void {
    if (this.queuedBytes > this.highWater * LOW_WATER_FRACTION) return;
    const wake = this.wakeReader;
    this.wakeReader = null;
    wake?.();
  }

  /** Stops taking the backend's notifications (subclasses stop their timers too). */
  protected stopListening(): void {
    for (const off of this.unsubscribe.splice(0)) off();
  }

  /** Fails the process for its consumer: the iterator throws `error`, completion rejects with it. */
  protected fail(error: Error): void {
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

  private async next(): Promise<IteratorResult<ProcessEvent>> {
    for (;;) {
      if (this.abandoned) return { done: true, value: undefined };
      const event = this.queue.shift();
      if (event) {
        if (event.kind === 'output') this.queuedBytes -= event.chunk.byteLength;
        this.took(event);
        this.roomMade();
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

  /**
   * The consumer gave up: drop what is queued and keep following until the close (pushed, or read), discarding
   * events as they come, so that `completion` still settles with the exit status.
   */
  private abandon(): void {
    if (this.abandoned) return;
    this.abandoned = true;
    const drop = () => {
      for (const event of this.queue) this.took(event);
      this.queue.length = 0;
      this.queuedBytes = 0;
    };
    drop();
    if (this.ended) {
      this.settle();
      return;
    }
    const drain = () => {
      drop();
      if (this.ended) this.settle();
      else this.wakeConsumer = drain;
      this.roomMade();
    };
    this.wakeConsumer = drain;
    this.roomMade();
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
}
