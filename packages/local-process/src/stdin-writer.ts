import type { Writable } from 'node:stream';
import { ProcessError } from './errors.js';

/** Bytes handed to a child's stdin that it has not consumed yet, per process. */
export const DEFAULT_STDIN_QUEUE_BYTES = 1024 * 1024;

const WRITE_FAILED = 'failed to write to process stdin';

interface WaitingWrite {
  chunk: Buffer;
  release: (() => void) | undefined;
  resolve: () => void;
  reject: (err: ProcessError) => void;
}

/**
 * Ordered, bounded writes to one child's stdin (pipe or PTY master).
 *
 * Bound: at most `limit` bytes are in flight (handed to the stream, not yet taken by the kernel). A write
 * that does not fit waits, in order, behind earlier ones; its promise settles once it is handed over. A
 * single write larger than `limit` goes through alone once nothing else is in flight. The waiting line is
 * bounded by `limit` bytes as well: a write beyond it (a child that stopped reading while a caller keeps
 * writing) fails at once with `write_failed`, so memory stays within 2 × `limit`.
 *
 * When the stream breaks (EPIPE, the child exited and Node closed the pipe, the PTY closed), waiting
 * writes and all later ones fail with `write_failed` ("failed to write to process stdin").
 *
 * A write may come with the `release` of the memory its chunk sits in (a pooled request buffer): it is
 * called once nothing reads the chunk any more, when the stream has written it (its write callback) or when
 * the write is refused or dropped.
 */
export class StdinWriter {
  readonly #sink: Writable;
  readonly #limit: number;
  readonly #waiting: WaitingWrite[] = [];
  #inFlight = 0;
  #waitingBytes = 0;
  #broken: Error | null = null;
  #ending = false;
  #endCalled = false;

  constructor(sink: Writable, limit: number = DEFAULT_STDIN_QUEUE_BYTES) {
    this.#sink = sink;
    this.#limit = limit;
    sink.on('error', (err: Error) => this.#fail(err));
    sink.on('close', () => this.#fail(new Error('stdin closed')));
  }

  /** True once `end()` was called: the caller reports `stdinClosed` from then on. */
  get ending(): boolean {
    return this.#ending;
  }

  /** True once the stream failed or closed: writes reject with `write_failed`. */
  get broken(): boolean {
    return this.#broken !== null;
  }

  /** Resolves once `chunk` is handed to the stream (queued, not necessarily consumed). */
  write(chunk: Buffer, release?: () => void): Promise<void> {
    if (this.#broken !== null || this.#ending) {
      release?.();
      return Promise.reject(this.#failure());
    }
    if (this.#waiting.length === 0 && this.#fits(chunk.length)) {
      this.#send(chunk, release);
      return Promise.resolve();
    }
    if (this.#waitingBytes > 0 && this.#waitingBytes + chunk.length > this.#limit) {
      release?.();
      return Promise.reject(
        new ProcessError(
          'write_failed',
          `${WRITE_FAILED}: the child is not reading (${this.#inFlight + this.#waitingBytes} bytes queued)`,
        ),
      );
    }
    return new Promise<void>((resolve, reject) => {
      this.#waiting.push({ chunk, release, resolve, reject });
      this.#waitingBytes += chunk.length;
    });
  }

  /** Closes stdin after every accepted write has been handed over. */
  end(): void {
    this.#ending = true;
    this.#pump();
  }

  /** Drops whatever is queued and closes the stream (the process is gone or being evicted). */
  destroy(): void {
    this.#fail(new Error('stdin destroyed'));
    this.#sink.destroy();
  }

  #fits(length: number): boolean {
    return this.#inFlight === 0 || this.#inFlight + length <= this.#limit;
  }

  #send(chunk: Buffer, release: (() => void) | undefined): void {
    if (chunk.length === 0) {
      release?.();
      return;
    }
    this.#inFlight += chunk.length;
    this.#sink.write(chunk, (err) => {
      release?.();
      this.#inFlight -= chunk.length;
      // Node completes a write with no error when the stream was destroyed before the write finished
      // (stream_base_commons' onWriteComplete), so a destroyed sink is a failure too: nothing more is sent
      // and waiting writes are refused, not reported accepted (seen in CI: a child killed mid-write).
      if (err || this.#sink.destroyed) this.#fail(err ?? new Error('stdin closed'));
      else this.#pump();
    });
  }

  #pump(): void {
    if (this.#broken !== null) return;
    while (this.#waiting.length > 0 && this.#fits(this.#waiting[0]!.chunk.length)) {
      const next = this.#waiting.shift()!;
      this.#waitingBytes -= next.chunk.length;
      this.#send(next.chunk, next.release);
      next.resolve();
    }
    if (this.#ending && !this.#endCalled && this.#waiting.length === 0) {
      this.#endCalled = true;
      this.#sink.end();
    }
  }

  #fail(err: Error): void {
    if (this.#broken !== null) return;
    this.#broken = err;
    const failure = this.#failure();
    for (const waiting of this.#waiting.splice(0)) {
      waiting.release?.();
      waiting.reject(failure);
    }
    this.#waitingBytes = 0;
  }

  #failure(): ProcessError {
    return new ProcessError('write_failed', WRITE_FAILED, { cause: this.#broken ?? undefined });
  }
}
