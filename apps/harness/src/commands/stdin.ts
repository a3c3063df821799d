import { fstatSync, read } from 'node:fs';
import { Readable } from 'node:stream';
import type { WriteStatus } from '@tether/client';
import type { CliIo } from '../common.js';

/** Stdin bytes sent and not yet answered, at most (the executor queues 1 MiB per child). */
export const STDIN_UNANSWERED_BYTES = 1024 * 1024;

/**
 * Piped input is sent in writes of up to this many bytes, and a file on stdin is read in pieces of this size
 * (`FileStdin`). Each write costs a request, an answer and their sealing on both ends and in the relay, so
 * the 64 KiB a pipe read gives were most of an upload's CPU: 256 KiB writes cut the harness's CPU per
 * 256 MiB from 2.3 to 1.3 s, the executor's from 1.4 to 0.85 s and the relay's from 0.6 to 0.35 s (measured
 * with `harness exec -i -- sh -c 'cat > /dev/null' < 256M.bin` against the quickstart stack). Since the
 * executor raises a child's stdin pipe for large writes (512 KiB), 512 KiB writes took a tenth less time and
 * harness CPU than 256 KiB (`exec -i -- sh -c 'cat > f' < 256M.bin`, farm-bench, 10 and 12 pairs both ways
 * round, 2026-12-07). Two of them fit the unanswered bound, so one is always on its way while the other is
 * answered.
 */
export const STDIN_WRITE_BYTES = 512 * 1024;

/** Where the input goes: a process this session started, or a detached one it attached to. */
export interface StdinTarget {
  readonly processId: string;
  write(chunk: Buffer): Promise<WriteStatus>;
  closeStdin(): Promise<WriteStatus>;
}

/** Watches the keyboard for the detach keys (`harness attach`); `forward` is what goes on to the process. */
export interface KeyWatcher {
  feed(chunk: Buffer): { forward: Buffer; detach: boolean };
}

export interface ForwardInputOptions {
  /** Stdin's end closes the process's stdin. */
  closeAtEnd: boolean;
  /** Stdin was put in raw mode for this: the cleanup puts it back. */
  rawMode: boolean;
  /** The detach keys end the input (and call `onDetachKeys`) instead of reaching the process. */
  keys?: { watcher: KeyWatcher; onDetachKeys: () => void };
  /** Says why input stopped early (the process takes no more). */
  note?: (text: string) => void;
}

/**
 * Keyboard or piped input to the process. Writes are pipelined, in order (the executor applies them in the
 * order they arrive), with at most STDIN_UNANSWERED_BYTES unanswered (held back pieces included): stdin
 * pauses beyond it, so memory stays bounded whatever is piped in, and the executor, which queues up to 1 MiB
 * for a child that reads slowly, never has to refuse one. One write at a time would wait a round trip
 * through the relay per 64 KiB. Input that is not a terminal is coalesced as Nagle's algorithm does: a
 * piece read while nothing is unanswered goes at once, later ones are held until they make
 * STDIN_WRITE_BYTES or every write is answered, so a slow trickle is not delayed and a fast pipe goes in
 * large writes. Keystrokes always go at once. The close follows the last write's answer. Answers the
 * cleanup, after which stdin stays paused: an answer that comes later must not start reading it again (a
 * reading TTY keeps the harness from exiting).
 */
export function forwardInput(target: StdinTarget, io: CliIo, options: ForwardInputOptions): () => void {
  const writes = new Set<Promise<void>>();
  const coalesce = io.stdin.isTTY !== true && options.keys === undefined;
  // A file on stdin reads into buffers it reuses: each chunk goes back once nothing reads it.
  const recycle = io.stdin instanceof FileStdin ? (chunk: Buffer) => (io.stdin as FileStdin).recycle(chunk) : null;
  const held: Buffer[] = [];
  let heldBytes = 0;
  let unanswered = 0;
  let stopped = false;
  const stop = () => {
    stopped = true;
    if (recycle) for (const chunk of held) recycle(chunk);
    held.length = 0;
    heldBytes = 0;
    io.stdin.off('data', onData);
  };
  const full = () => unanswered + heldBytes >= STDIN_UNANSWERED_BYTES;
  const send = (chunk: Buffer) => {
    if (chunk.byteLength === 0) return;
    unanswered += chunk.byteLength;
    const write: Promise<void> = target
      .write(chunk)
      .then((status) => {
        if (status === 'accepted') return;
        if (!stopped) options.note?.(`${target.processId} takes no more input (${status})`);
        stop();
      })
      .catch(stop)
      .finally(() => {
        // Answered (or failed): the request, which a resumed session sends again, no longer reads the chunk.
        recycle?.(chunk);
        writes.delete(write);
        unanswered -= chunk.byteLength;
        if (stopped) return;
        if (unanswered === 0) flush();
        if (!full() && io.stdin.isPaused()) io.stdin.resume();
      });
    writes.add(write);
  };
  /** Sends what is held back as one write. */
  const flush = () => {
    if (heldBytes === 0) return;
    const chunk = held.length === 1 ? held[0]! : Buffer.concat(held, heldBytes);
    if (held.length > 1 && recycle) for (const piece of held) recycle(piece);
    held.length = 0;
    heldBytes = 0;
    send(chunk);
  };
  const forward = (chunk: Buffer) => {
    if (chunk.byteLength === 0) return;
    if (!coalesce) send(chunk);
    else {
      held.push(chunk);
      heldBytes += chunk.byteLength;
      if (heldBytes >= STDIN_WRITE_BYTES || unanswered === 0) flush();
    }
    if (full()) io.stdin.pause();
  };
  const onData = (chunk: Buffer) => {
    if (stopped) return;
    const keys = options.keys;
    if (keys === undefined) {
      forward(chunk);
      return;
    }
    const { forward: bytes, detach } = keys.watcher.feed(chunk);
    forward(bytes);
    if (detach) {
      stop();
      keys.onDetachKeys();
    }
  };
  const onEnd = () => {
    if (stopped) return;
    flush();
    if (!options.closeAtEnd) return;
    void Promise.all(writes)
      .then(() => (stopped ? undefined : target.closeStdin()))
      .catch(() => undefined);
  };
  io.stdin.on('data', onData);
  io.stdin.once('end', onEnd);
  io.stdin.resume();
  return () => {
    stop();
    io.stdin.off('end', onEnd);
    if (options.rawMode) io.stdin.setRawMode?.(false);
    io.stdin.pause();
  };
}

/**
 * A regular file on stdin (`harness exec -i … < file`), read in STDIN_WRITE_BYTES pieces into buffers that
 * come back (`recycle`) once their write is answered, instead of `process.stdin`'s fresh 64 KiB per read:
 * fresh buffers cost a page fault per 4 KiB and a full collection per ~64 MiB read (reading 256 MiB took
 * 0.25 CPU-s through a stream, 0.11 into two reused buffers). At most the window's worth is in use at once,
 * so at most that many buffers are ever made. The file descriptor stays open (fd 0 is not ours).
 */
export class FileStdin extends Readable {
  readonly #fd: number;
  /** Buffers free for the next read. */
  readonly #free: Buffer[] = [];
  /** The memory of every buffer this stream made, and of those free now (a chunk comes back once). */
  readonly #made = new WeakSet<ArrayBufferLike>();
  readonly #freeMemory = new WeakSet<ArrayBufferLike>();

  constructor(fd: number) {
    super({ highWaterMark: STDIN_WRITE_BYTES });
    this.#fd = fd;
  }

  override _read(): void {
    let buffer = this.#free.pop();
    if (buffer === undefined) {
      buffer = Buffer.allocUnsafeSlow(STDIN_WRITE_BYTES);
      this.#made.add(buffer.buffer);
    } else this.#freeMemory.delete(buffer.buffer);
    const into = buffer;
    read(this.#fd, into, 0, into.byteLength, null, (err, bytes) => {
      if (err) this.destroy(err);
      else if (bytes === 0) {
        this.recycle(into);
        this.push(null);
      } else this.push(into.subarray(0, bytes));
    });
  }

  /** `chunk`, if it is one of this stream's, is read by nobody any more: its buffer serves a later read. */
  recycle(chunk: Buffer): void {
    const memory = chunk.buffer;
    if (!this.#made.has(memory) || this.#freeMemory.has(memory)) return;
    this.#freeMemory.add(memory);
    this.#free.push(Buffer.from(memory, 0, STDIN_WRITE_BYTES));
  }
}

/** What the CLI reads as its stdin: a regular file as a FileStdin, anything else as Node makes it. */
export function stdinSource(): NodeJS.ReadStream {
  let file = false;
  try {
    file = fstatSync(0).isFile();
  } catch {
    // No fd 0 (closed by the caller): process.stdin copes with that.
  }
  return file ? (new FileStdin(0) as unknown as NodeJS.ReadStream) : process.stdin;
}
