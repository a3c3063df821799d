/**
 * One session's recording file(s), on the recording worker's thread (recording-worker.ts): events become
 * asciicast lines (@tether/recording's CastWriter), written in one writev per batch of events (`flush`), a part
 * past its size or age is sealed and the session goes on in the next. The executor's thread only copies bytes
 * and posts them (recordings.ts): escaping, hashing and writing a stream's bytes cost about 1.5 ns per byte of
 * CPU even with the native escape (more than half a core at 400 MB/s), which must not come out of the event loop
 * that serves the process.
 */
import type { KeyObject } from 'node:crypto';
import { closeSync, openSync, rmSync, writeSync, writevSync } from 'node:fs';
import { join } from 'node:path';
import { CastWriter, type LineSlab } from '@tether/recording';

export interface RecordingFileOptions {
  dir: string;
  maxFileBytes: number;
  maxFileAgeMs: number;
  /** Where the lines are made: the worker's one slab, shared by its files (default: the writer's own). */
  slab?: LineSlab;
}

export interface RecordingFileStart {
  processId: string;
  argv: string[];
  tty: boolean;
  size: { rows: number; cols: number } | null;
  startedBy: string;
  detached: boolean;
  /** When it started (ms since the epoch, the executor's clock): event times count from here. */
  startedAtMs: number;
}

/**
 * An event as the executor's thread posts it: its kind, when it happened (ms since the epoch), what it carries, and
 * its cost (what it counted against the recording's queue bound; given back once written).
 */
export type RecordingEvent =
  | { kind: 'output'; at: number; stream: string; data: Uint8Array; cost: number }
  | { kind: 'input'; at: number; from: string; data: Uint8Array; cost: number }
  | { kind: 'resize'; at: number; rows: number; cols: number; cost: number }
  | { kind: 'gap'; at: number; bytes: number; cost: number }
  | { kind: 'exit'; at: number; code: number; cost: number };

export interface RecordingFileHooks {
  /** Events of this total cost are written (the queue bound is given back). */
  written(cost: number, bytes: number): void;
  /** The file could not be written: nothing more will be. */
  failed(why: string): void;
}

export class RecordingFile {
  readonly #start: RecordingFileStart;
  readonly #key: KeyObject;
  readonly #publicKey: string;
  readonly #options: RecordingFileOptions;
  readonly #hooks: RecordingFileHooks;
  #writer!: CastWriter;
  #fd: number | null = null;
  #fileName = '';
  #part = 1;
  #partBytes = 0;
  #partStartedMs = 0;
  #size: { rows: number; cols: number };
  /** Lines made and not yet written (`flush` writes them), and the queue cost of their events. */
  #pending: Buffer[] = [];
  #pendingBytes = 0;
  #pendingCost = 0;
  #failed = false;
  #closed = false;

  constructor(
    start: RecordingFileStart,
    key: KeyObject,
    publicKey: string,
    options: RecordingFileOptions,
    hooks: RecordingFileHooks,
  ) {
    this.#start = start;
    this.#key = key;
    this.#publicKey = publicKey;
    this.#options = options;
    this.#hooks = hooks;
    this.#size = start.size ?? { rows: 24, cols: 80 };
  }

  /** The file being written. */
  get path(): string {
    return join(this.#options.dir, this.#fileName);
  }

  /** Opens the first part; throws (its cause) when it cannot. */
  open(): void {
    const fileName = this.#newWriter(null);
    this.#fd = openSync(join(this.#options.dir, fileName), 'wx', 0o600);
    this.#push(Buffer.from(`${this.#writer.headerLine}\n`), 0);
  }

  /** Makes the event's line (written by the next `flush`). */
  apply(event: RecordingEvent): void {
    if (this.#failed || this.#closed) return;
    const writer = this.#writer;
    let text: Buffer;
    switch (event.kind) {
      case 'output':
        text = writer.output(event.stream, bufferOf(event.data), event.at);
        break;
      case 'input':
        text = writer.input(bufferOf(event.data), event.from, event.at);
        break;
      case 'resize':
        this.#size = { rows: event.rows, cols: event.cols };
        text = writer.resize(event.cols, event.rows, event.at);
        break;
      case 'gap':
        text = writer.gap(event.bytes, event.at);
        break;
      case 'exit':
        text = writer.exit(event.code, event.at);
        break;
    }
    this.#push(text, event.cost);
    // Decided as lines are made (not as they are written), so that every line of a part is its chain's.
    if (
      this.#partBytes >= this.#options.maxFileBytes ||
      Date.now() - this.#partStartedMs >= this.#options.maxFileAgeMs
    ) {
      this.#nextPart();
    }
  }

  /** The periodic seal, when something is new (written at once). */
  sealIfDue(): void {
    if (this.#failed || this.#closed || this.#writer.unsealed === 0) return;
    this.#push(this.#writer.seal(), 0);
    this.flush();
  }

  /**
   * Writes the lines made since the last flush, in one writev (the worker flushes after each batch of events). On
   * this thread, not the thread pool's: the worker does nothing else, and a write through fs/promises cost 2.4
   * times the CPU of the same writev made here (1 GiB in 72 KiB writes: 0.9 CPU-s against 0.37, tmpfs and ext4
   * alike; its thread hand-offs, not the copy). A disk that hangs holds this thread, not the pool the executor's
   * file system methods share.
   */
  flush(): void {
    if (this.#pending.length === 0 || this.#failed) return;
    const buffers = this.#pending;
    const bytes = this.#pendingBytes;
    const cost = this.#pendingCost;
    this.#pending = [];
    this.#pendingBytes = 0;
    this.#pendingCost = 0;
    try {
      writeAll(this.#fd!, buffers, bytes);
    } catch (err) {
      this.#fail(err as Error);
      return;
    }
    this.#hooks.written(cost, bytes);
  }

  /** Seals what is left, writes it, closes the file (a session that recorded nothing leaves none). */
  close(): void {
    if (this.#closed) return;
    if (!this.#failed) this.#push(this.#writer.seal(), 0);
    this.flush();
    this.#closed = true;
    const fd = this.#fd;
    this.#fd = null;
    if (fd !== null) closeQuietly(fd);
    if (this.#writer.events === 0 && this.#part === 1) rmSync(this.path, { force: true });
  }

  #push(bytes: Buffer, cost: number): void {
    if (bytes.length === 0 && cost === 0) return;
    this.#pending.push(bytes);
    this.#pendingBytes += bytes.length;
    this.#pendingCost += cost;
    this.#partBytes += bytes.length;
  }

  #fail(err: Error): void {
    this.#failed = true;
    this.#pending = [];
    this.#hooks.failed(`writing ${this.path} failed: ${err.message}`);
  }

  #nextPart(): void {
    this.#push(this.#writer.seal(), 0);
    this.flush();
    if (this.#failed) return;
    const previous = { file: this.#fileName, head: this.#writer.head };
    this.#part++;
    const fileName = this.#newWriter(previous);
    try {
      closeSync(this.#fd!);
      this.#fd = null;
      this.#fd = openSync(join(this.#options.dir, fileName), 'wx', 0o600);
    } catch (err) {
      this.#fail(err as Error);
      return;
    }
    this.#push(Buffer.from(`${this.#writer.headerLine}\n`), 0);
  }

  /** A writer for the next part (its name becomes the current one); its caller opens the file. */
  #newWriter(previous: { file: string; head: string } | null): string {
    const stamp = new Date(this.#start.startedAtMs).toISOString().replace(/[:.]/g, '-');
    const safeId = this.#start.processId.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 100);
    this.#fileName = `${stamp}-${safeId}${this.#part > 1 ? `.part${this.#part}` : ''}.cast`;
    this.#partStartedMs = Date.now();
    this.#partBytes = 0;
    this.#writer = new CastWriter(
      {
        version: 2,
        width: this.#size.cols,
        height: this.#size.rows,
        timestamp: Math.floor(Date.now() / 1000),
        command: this.#start.argv.join(' '),
        tether: {
          key: this.#publicKey,
          processId: this.#start.processId,
          argv: this.#start.argv,
          tty: this.#start.tty,
          detached: this.#start.detached,
          startedBy: this.#start.startedBy,
          part: this.#part,
          ...(previous ? { previous } : {}),
        },
      },
      this.#key,
      Date.now,
      previous ? Date.now() : this.#start.startedAtMs,
      this.#options.slab ? { slab: this.#options.slab } : {},
    );
    return this.#fileName;
  }
}

/**
 * Writes `buffers` (`bytes` in all) at the file's position: not joined first, which copied every byte once more
 * (measured: 0.14 ns per byte, a tenth of what making the lines costs). A short write goes on from where it
 * stopped; a failure (ENOSPC, EFBIG) throws.
 */
function writeAll(fd: number, buffers: Buffer[], bytes: number): void {
  let written = writevSync(fd, buffers);
  if (written === bytes) return;
  const rest = Buffer.concat(buffers, bytes);
  while (written < bytes) written += writeSync(fd, rest, written, bytes - written);
}

function closeQuietly(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    // Its lines were written (or their failure reported); nothing more to say of it.
  }
}

function bufferOf(data: Uint8Array): Buffer {
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}
