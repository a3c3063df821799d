import { SendCredit } from '@tether/exec-protocol';
import { ProcessError } from './errors.js';
import type { OutputStream, ProcessEvent, ReadOptions, ReadResult, RetainedChunk } from './types.js';

/** Retained chunk bytes per process (Codex `RETAINED_OUTPUT_BYTES_PER_PROCESS`). */
export const DEFAULT_RETAINED_OUTPUT_BYTES = 1024 * 1024;
/** Retained chunks per process (Codex `RETAINED_OUTPUT_CHUNKS_PER_PROCESS`): keeps a full replay decodable. */
export const DEFAULT_RETAINED_OUTPUT_CHUNKS = 50_000;
/** setTimeout's ceiling; a longer `waitMs` is clamped to it (about 24.8 days). */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** Dropped slots at the front of the ring are compacted away once there are this many (and they are half of it). */
const COMPACT_AFTER = 1024;

export interface OutputLogOptions {
  processId: string;
  /** The output streams that must all end (together with a known exit) before the close event. */
  streams: readonly OutputStream[];
  maxBytes?: number;
  maxChunks?: number;
  /** Called synchronously for every event, in seq order. */
  onEvent?: ((event: ProcessEvent) => void) | undefined;
  /** Called with each chunk that retention drops (so its buffer can be reused). */
  onDrop?: ((chunk: Buffer) => void) | undefined;
  /**
   * Flow control (exec-protocol's flow-control.ts): output is retained until acknowledged (`ack`), never
   * dropped for the budgets, and `flowBlocked` says when this much is unacknowledged (or `maxChunks`
   * chunks are), so the reader of the child can stop. Acknowledged output is forgotten at once.
   */
  flowWindowBytes?: number | null | undefined;
}

/**
 * The per-process sequence log (spec §4). One counter, starting at 1, numbers output chunks, the exit
 * event and the close event. Chunks are retained within a byte and a chunk budget, oldest dropped first;
 * exit and close only consume seqs. `read` implements the §4.3 long poll.
 */
export class OutputLog {
  readonly #processId: string;
  readonly #maxBytes: number;
  readonly #maxChunks: number;
  readonly #onEvent: ((event: ProcessEvent) => void) | undefined;
  readonly #onDrop: ((chunk: Buffer) => void) | undefined;
  readonly #openStreams: Set<OutputStream>;

  /** Retained chunks live in `#chunks[#head…]`; dropped slots before `#head` are cleared so the bytes can be freed. */
  #chunks: (RetainedChunk | undefined)[] = [];
  #head = 0;
  #bytes = 0;
  #nextSeq = 1;
  #exited = false;
  #exitCode: number | null = null;
  #closed = false;
  /** Pending long polls; each re-checks its own condition when woken. */
  readonly #waiters = new Set<() => void>();
  /** Set when the process is flow-controlled: what the client has not acknowledged yet. */
  readonly #credit: SendCredit | null;

  constructor(options: OutputLogOptions) {
    this.#credit = options.flowWindowBytes == null ? null : new SendCredit(options.flowWindowBytes);
    this.#processId = options.processId;
    this.#maxBytes = options.maxBytes ?? DEFAULT_RETAINED_OUTPUT_BYTES;
    this.#maxChunks = options.maxChunks ?? DEFAULT_RETAINED_OUTPUT_CHUNKS;
    this.#onEvent = options.onEvent;
    this.#onDrop = options.onDrop;
    this.#openStreams = new Set(options.streams);
  }

  get nextSeq(): number {
    return this.#nextSeq;
  }
  get exited(): boolean {
    return this.#exited;
  }
  get exitCode(): number | null {
    return this.#exitCode;
  }
  #sandboxDenied = false;
  get closed(): boolean {
    return this.#closed;
  }
  /** Every output stream has ended. */
  get streamsEnded(): boolean {
    return this.#openStreams.size === 0;
  }
  get retainedBytes(): number {
    return this.#bytes;
  }
  get retainedChunks(): number {
    return this.#chunks.length - this.#head;
  }
  /** The flow window granted, or null when the process is not flow-controlled. */
  get flowWindowBytes(): number | null {
    return this.#credit?.windowBytes ?? null;
  }
  /** Output handed out and not acknowledged (flow control; 0 without). */
  get unackedBytes(): number {
    return this.#credit?.inFlight ?? 0;
  }
  /**
   * Flow-controlled and `limit` bytes (default: the window) or `maxChunks` chunks are unacknowledged: the
   * child's output should not be read.
   */
  flowBlocked(limit = Number.POSITIVE_INFINITY): boolean {
    const credit = this.#credit;
    if (credit === null) return false;
    return credit.inFlight >= Math.min(limit, credit.windowBytes) || this.retainedChunks >= this.#maxChunks;
  }

  /**
   * Flow control: the client has consumed every event up to `seq`. Drops those chunks (they will not be
   * asked for again) and returns whether anything was freed. Acknowledging more than was sent, or again,
   * is harmless; without flow control it is ignored.
   */
  ack(seq: number): boolean {
    const credit = this.#credit;
    if (credit === null) return false;
    let bytes = 0;
    let chunks = 0;
    while (this.#head < this.#chunks.length && this.#chunks[this.#head]!.seq <= seq) {
      bytes += this.#dropHead();
      chunks++;
    }
    this.#compact();
    credit.acked(bytes);
    return chunks > 0;
  }

  /** Records one chunk read from `stream`. Output after the exit keeps getting seqs (a grandchild may hold the pipe). */
  append(stream: OutputStream, chunk: Buffer): void {
    if (this.#closed || !this.#openStreams.has(stream)) {
      throw new Error(`output on ${stream} after the stream ended`);
    }
    const seq = this.#nextSeq++;
    this.#chunks.push({ seq, stream, chunk });
    this.#bytes += chunk.length;
    if (this.#credit === null) this.#trim();
    else this.#credit.sent(chunk.length);
    this.#emit({ kind: 'output', processId: this.#processId, seq, stream, chunk });
    this.#wake();
  }

  /** The output still retained, oldest first (what a sandbox denial is read from). */
  *retainedOutput(): Iterable<Buffer> {
    for (let i = this.#head; i < this.#chunks.length; i++) yield this.#chunks[i]!.chunk;
  }

  /** Whether the exit was classified as the sandbox's doing. */
  get sandboxDenied(): boolean {
    return this.#sandboxDenied;
  }

  /** Records the exit status once; later calls are ignored. */
  exit(exitCode: number, sandboxDenied = false): void {
    if (this.#exited) return;
    this.#exited = true;
    this.#exitCode = exitCode;
    this.#sandboxDenied = sandboxDenied;
    this.#emit({ kind: 'exited', processId: this.#processId, seq: this.#nextSeq++, exitCode, sandboxDenied });
    this.#maybeClose();
    this.#wake();
  }

  /** Marks `stream` as ended (EOF or destroyed); ending a stream twice is a no-op. */
  endStream(stream: OutputStream): void {
    if (!this.#openStreams.delete(stream)) return;
    this.#maybeClose();
    this.#wake();
  }

  /**
   * Spec §4.3. Returns at once when there are chunks after `afterSeq`, the process is closed, or an exit
   * event after `afterSeq` has not been seen; otherwise waits up to `waitMs` for a change.
   */
  read(options: ReadOptions = {}): Promise<ReadResult> {
    const afterSeq = checkCount('afterSeq', options.afterSeq) ?? 0;
    const maxBytes = checkCount('maxBytes', options.maxBytes);
    const waitMs = Math.min(checkCount('waitMs', options.waitMs) ?? 0, MAX_TIMER_MS);
    const signal = options.signal;
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#hasNews(afterSeq) || waitMs === 0) return Promise.resolve(this.#collect(afterSeq, maxBytes));

    return new Promise<ReadResult>((resolve, reject) => {
      const finish = (): void => {
        this.#waiters.delete(wake);
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      };
      const wake = (): void => {
        if (!this.#hasNews(afterSeq)) return;
        finish();
        resolve(this.#collect(afterSeq, maxBytes));
      };
      const onAbort = (): void => {
        finish();
        reject(signal?.reason);
      };
      const timer = setTimeout(() => {
        finish();
        resolve(this.#collect(afterSeq, maxBytes));
      }, waitMs);
      this.#waiters.add(wake);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** The §4.3 return condition, without building a response. */
  #hasNews(afterSeq: number): boolean {
    const last = this.#chunks.length > this.#head ? this.#chunks[this.#chunks.length - 1] : undefined;
    return (
      (last !== undefined && last.seq > afterSeq) || this.#closed || (this.#exited && afterSeq < this.#nextSeq - 1)
    );
  }

  #collect(afterSeq: number, maxBytes: number | null): ReadResult {
    const chunks: RetainedChunk[] = [];
    let total = 0;
    for (let i = this.#firstIndexAfter(afterSeq); i < this.#chunks.length; i++) {
      const retained = this.#chunks[i]!;
      // The first chunk is always returned, even when it alone is larger than maxBytes.
      if (maxBytes !== null && chunks.length > 0 && total + retained.chunk.length > maxBytes) break;
      chunks.push(retained);
      total += retained.chunk.length;
      if (maxBytes !== null && total >= maxBytes) break;
    }
    const lastReturned = chunks[chunks.length - 1];
    // With maxBytes given, nextSeq resumes right after the page (it may not cover a later exit/close).
    const nextSeq = maxBytes === null || lastReturned === undefined ? this.#nextSeq : lastReturned.seq + 1;
    return {
      chunks,
      nextSeq,
      exited: this.#exited,
      exitCode: this.#exitCode,
      closed: this.#closed,
      sandboxDenied: this.#sandboxDenied,
    };
  }

  /** Binary search: the index of the first retained chunk with seq > afterSeq (seqs increase, with gaps). */
  #firstIndexAfter(afterSeq: number): number {
    let lo = this.#head;
    let hi = this.#chunks.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.#chunks[mid]!.seq <= afterSeq) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Drops the oldest chunks until both budgets hold (no marker: readers see missing seqs). */
  #trim(): void {
    while (
      this.#head < this.#chunks.length &&
      (this.#bytes > this.#maxBytes || this.retainedChunks > this.#maxChunks)
    ) {
      this.#dropHead();
    }
    this.#compact();
  }

  /** Drops the oldest retained chunk; returns its size. */
  #dropHead(): number {
    const dropped = this.#chunks[this.#head]!.chunk;
    this.#bytes -= dropped.length;
    this.#chunks[this.#head] = undefined;
    this.#head++;
    this.#onDrop?.(dropped);
    return dropped.length;
  }

  #compact(): void {
    if (this.#head >= COMPACT_AFTER && this.#head * 2 >= this.#chunks.length) {
      this.#chunks = this.#chunks.slice(this.#head);
      this.#head = 0;
    }
  }

  #maybeClose(): void {
    if (this.#closed || !this.#exited || this.#openStreams.size > 0) return;
    this.#closed = true;
    this.#emit({ kind: 'closed', processId: this.#processId, seq: this.#nextSeq++ });
  }

  #emit(event: ProcessEvent): void {
    if (this.#onEvent === undefined) return;
    try {
      this.#onEvent(event);
    } catch (err) {
      // A throwing listener must not corrupt the log (the state is already updated) nor stop the
      // stream reader that called us; surface it as an uncaught error instead.
      queueMicrotask(() => {
        throw err;
      });
    }
  }

  #wake(): void {
    // Deleting the current entry while iterating a Set is safe; woken waiters remove themselves.
    for (const wake of this.#waiters) wake();
  }
}

function checkCount(name: string, value: number | null | undefined): number | null {
  if (value === null || value === undefined) return null;
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new ProcessError('invalid_argument', `${name} must be a non-negative integer`);
  }
  return value;
}
