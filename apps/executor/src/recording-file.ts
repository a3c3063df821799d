/**
 * One session's recording file(s), on the recording worker's thread (recording-worker.ts): events become
 * asciicast lines (@tether/recording's CastWriter), one write loop per recording writes them in order, a part
 * past its size or age is sealed and the session goes on in the next. The executor's thread only copies bytes
 * and posts them (recordings.ts): escaping, hashing and writing a stream's bytes cost about 1.5 ns per byte of
 * CPU even with the native escape (more than half a core at 400 MB/s), which must not come out of the event loop
 * that serves the process.
 */
import type { KeyObject } from 'node:crypto';
import { type FileHandle, open, unlink } from 'node:fs/promises';
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

type Queued = { bytes: Buffer; cost: number } | { fileName: string };

export class RecordingFile {
  readonly #start: RecordingFileStart;
  readonly #key: KeyObject;
  readonly #publicKey: string;
  readonly #options: RecordingFileOptions;
  readonly #hooks: RecordingFileHooks;
  #writer!: CastWriter;
  #file: FileHandle | null = null;
  #fileName = '';
  #part = 1;
  #partBytes = 0;
  #partStartedMs = 0;
  #size: { rows: number; cols: number };
  #queue: Queued[] = [];
  #writing: Promise<void> | null = null;
  #failed = false;
  #done: Promise<void> | null = null;

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
  async open(): Promise<void> {
    const fileName = this.#newWriter(null);
    this.#file = await open(join(this.#options.dir, fileName), 'wx', 0o600);
    this.#push(Buffer.from(`${this.#writer.headerLine}\n`), 0);
  }

  apply(event: RecordingEvent): void {
    if (this.#failed || this.#done) return;
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

  /** The periodic seal, when something is new. */
  sealIfDue(): void {
    if (this.#failed || this.#done || this.#writer.unsealed === 0) return;
    this.#push(this.#writer.seal(), 0);
  }

  /** Seals what is left, writes it, closes the file (a session that recorded nothing leaves none). */
  close(): Promise<void> {
    if (this.#done) return this.#done;
    if (!this.#failed) this.#push(this.#writer.seal(), 0);
    this.#done = this.#finish();
    return this.#done;
  }

  async #finish(): Promise<void> {
    while (this.#writing) await this.#writing;
    const file = this.#file;
    this.#file = null;
    await file?.close().catch(() => undefined);
    if (this.#writer.events === 0 && this.#part === 1) await unlink(this.path).catch(() => undefined);
  }

  #push(bytes: Buffer, cost: number): void {
    if (bytes.length === 0 && cost === 0) return;
    this.#queue.push({ bytes, cost });
    this.#partBytes += bytes.length;
    this.#writing ??= this.#drain();
  }

  #nextPart(): void {
    this.#push(this.#writer.seal(), 0);
    const previous = { file: this.#fileName, head: this.#writer.head };
    this.#part++;
    const fileName = this.#newWriter(previous);
    this.#queue.push({ fileName });
    this.#push(Buffer.from(`${this.#writer.headerLine}\n`), 0);
  }

  async #drain(): Promise<void> {
    try {
      while (this.#queue.length > 0 && !this.#failed) {
        const at = this.#queue.findIndex((item) => 'fileName' in item);
        const items = (at < 0 ? this.#queue.splice(0) : this.#queue.splice(0, at)) as Array<{
          bytes: Buffer;
          cost: number;
        }>;
        if (items.length > 0) {
          const buffers = items.map((item) => item.bytes);
          const bytes = buffers.reduce((sum, buffer) => sum + buffer.length, 0);
          if (bytes > 0) await writeAll(this.#file!, buffers, bytes);
          this.#hooks.written(
            items.reduce((sum, item) => sum + item.cost, 0),
            bytes,
          );
          continue;
        }
        const { fileName } = this.#queue.shift() as { fileName: string };
        await this.#file!.close();
        this.#file = await open(join(this.#options.dir, fileName), 'wx', 0o600);
      }
    } catch (err) {
      this.#failed = true;
      this.#queue = [];
      this.#hooks.failed(`writing ${this.path} failed: ${(err as Error).message}`);
    } finally {
      this.#writing = null;
    }
  }

  /** A writer for the next part (its name becomes the current one); the file is opened by the write loop. */
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
 * Writes `buffers` (`bytes` in all) at the file's position, in one writev: not joined first, which copied every
 * byte once more (measured: 0.14 ns per byte, a tenth of what making the lines costs). libuv's writev goes on
 * after a short write; one that still stops short (its error is not reported) is finished by writeFile, which
 * throws the failure (ENOSPC, EFBIG).
 */
async function writeAll(file: FileHandle, buffers: Buffer[], bytes: number): Promise<void> {
  const { bytesWritten } = await file.writev(buffers);
  if (bytesWritten < bytes) await file.writeFile(Buffer.concat(buffers).subarray(bytesWritten));
}

function bufferOf(data: Uint8Array): Buffer {
  return Buffer.from(data.buffer, data.byteOffset, data.byteLength);
}
