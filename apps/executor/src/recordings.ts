/**
 * `--record-dir DIR`: every process session this executor runs (PTY and pipes, attached or detached) is written
 * to DIR as asciicast v2, hash-chained and sealed with the executor's recording key (@tether/recording). The
 * relay never sees a session in the clear, so the executor is the one place that can record it.
 *
 * - The key: DIR/recording-key.pem (Ed25519, 0600, made on first use) and its public half DIR/recording-key.pub
 *   (`ed25519:BASE64`), which `harness recording verify` trusts when it finds it beside a recording.
 * - Files: DIR/<UTC start>-<process id>.cast, mode 0600; a session past `maxFileBytes` or `maxFileAgeMs` goes on
 *   in `….part2.cast` (its header names the part before and that part's chain head).
 * - Never slows a process: events are queued (at most `queueBytes` per recording) and written by one loop per
 *   recording. Seals every `sealEveryMs` while there is something new, and at the end.
 * - When the disk is full, failing or slower than the output: `failurePolicy` `open` keeps the process running,
 *   drops what does not fit (a `tether.gap` event says how much, once there is room) or stops recording it after
 *   a write error; `closed` ends the process (SIGKILL of its group, as a terminate) and refuses new starts whose
 *   recording cannot be opened. Both counted in /metrics.
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { type FileHandle, open, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { OutputStream, RecordingSink } from '@tether/local-process';
import { CastWriter, publicKeyText } from '@tether/recording';
import type { ExecutorMetrics } from './metrics.js';

export type RecordingFailurePolicy = 'open' | 'closed';

export interface RecordingOptions {
  dir: string;
  failurePolicy: RecordingFailurePolicy;
  /** A file past this size is sealed and the session goes on in the next part. */
  maxFileBytes: number;
  /** …or past this age. */
  maxFileAgeMs: number;
  /** Events queued per recording before the policy applies. */
  queueBytes: number;
  /** How often a recording with new events is sealed. */
  sealEveryMs: number;
}

export const DEFAULT_RECORDING_OPTIONS: Omit<RecordingOptions, 'dir'> = {
  failurePolicy: 'open',
  maxFileBytes: 256 * 1024 * 1024,
  maxFileAgeMs: 24 * 3600 * 1000,
  queueBytes: 8 * 1024 * 1024,
  sealEveryMs: 1_000,
};

export interface RecordingStart {
  processId: string;
  argv: string[];
  tty: boolean;
  size: { rows: number; cols: number } | null;
  /** Who started it (a principal's key, `local`). */
  startedBy: string;
  detached: boolean;
}

/** The recording directory or its key cannot be used (the executor does not start). */
export class RecordDirError extends Error {}

/** Refused start: the policy is `closed` and the recording could not be opened. */
export class RecordingUnavailableError extends Error {}

export class Recordings {
  readonly options: RecordingOptions;
  readonly publicKey: string;
  readonly #key: KeyObject;
  readonly #metrics: ExecutorMetrics | null;
  readonly #active = new Set<ProcessRecording>();
  readonly #sealTimer: NodeJS.Timeout;
  readonly #onProblem: (message: string) => void;
  #closed = false;

  /** Opens (or makes) DIR and its key; throws naming DIR when it cannot. */
  constructor(
    options: RecordingOptions,
    metrics: ExecutorMetrics | null = null,
    onProblem: (message: string) => void = () => undefined,
  ) {
    this.options = options;
    this.#metrics = metrics;
    this.#onProblem = onProblem;
    try {
      mkdirSync(options.dir, { recursive: true, mode: 0o700 });
      this.#key = loadOrMakeKey(options.dir);
    } catch (err) {
      throw new RecordDirError(`--record-dir ${options.dir}: ${(err as Error).message}`);
    }
    this.publicKey = publicKeyText(createPublicKey(this.#key));
    this.#sealTimer = setInterval(() => {
      for (const recording of this.#active) recording.sealIfDue();
    }, options.sealEveryMs);
    this.#sealTimer.unref();
    metrics?.recordingsActive(() => this.#active.size);
  }

  /**
   * A recording for a process about to start. Its file is opened as the first event is written; a file that
   * cannot be opened follows the policy (`closed`: this throws RecordingUnavailableError).
   */
  async begin(start: RecordingStart): Promise<ProcessRecording> {
    if (this.#closed) throw new RecordingUnavailableError('the executor is shutting down');
    const recording = new ProcessRecording(start, this.#key, this.publicKey, this.options, {
      metrics: this.#metrics,
      problem: (message) => this.#onProblem(message),
      gone: (done) => this.#active.delete(done),
    });
    try {
      await recording.openFirst();
    } catch (err) {
      this.#metrics?.recordingFailed(this.options.failurePolicy, 'open');
      const why = `cannot record process ${start.processId} in ${this.options.dir}: ${(err as Error).message}`;
      this.#onProblem(why);
      if (this.options.failurePolicy === 'closed') throw new RecordingUnavailableError(why);
      recording.disable();
    }
    this.#active.add(recording);
    return recording;
  }

  /** Seals and writes what every recording holds (after the last process: nothing new comes). */
  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#sealTimer);
    await Promise.all([...this.#active].map((recording) => recording.finished()));
  }
}

function loadOrMakeKey(dir: string): KeyObject {
  const path = join(dir, 'recording-key.pem');
  if (existsSync(path)) {
    const key = createPrivateKey(readFileSync(path));
    if (key.asymmetricKeyType !== 'ed25519') throw new Error(`${path} is not an Ed25519 key`);
    return key;
  }
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  writeFileSync(path, privateKey.export({ format: 'pem', type: 'pkcs8' }), { mode: 0o600, flag: 'wx' });
  chmodSync(path, 0o600);
  writeFileSync(join(dir, 'recording-key.pub'), `${publicKeyText(publicKey)}\n`, { mode: 0o644 });
  return privateKey;
}

interface RecordingHooks {
  metrics: ExecutorMetrics | null;
  problem: (message: string) => void;
  gone: (recording: ProcessRecording) => void;
}

/** One process's recording: the table calls it (RecordingSink); one write loop owns its file. */
export class ProcessRecording implements RecordingSink {
  readonly #start: RecordingStart;
  readonly #key: KeyObject;
  readonly #publicKey: string;
  readonly #options: RecordingOptions;
  readonly #hooks: RecordingHooks;
  readonly #startedAt = new Date();
  #writer!: CastWriter;
  #file: FileHandle | null = null;
  #fileName = '';
  #part = 1;
  /** Characters of events made for the current part, and when it began. */
  #partBytes = 0;
  #partStartedMs = 0;
  #size: { rows: number; cols: number };
  /** Lines to write, in order, and where a new part's file begins. */
  #queue: Array<string | { fileName: string }> = [];
  #queuedBytes = 0;
  #droppedBytes = 0;
  #writing: Promise<void> | null = null;
  #disabled = false;
  #closed = false;
  #kill: (() => void) | null = null;
  /** Set by close: the last writes, the file closed. */
  #done: Promise<void> | null = null;

  constructor(
    start: RecordingStart,
    key: KeyObject,
    publicKey: string,
    options: RecordingOptions,
    hooks: RecordingHooks,
  ) {
    this.#start = start;
    this.#key = key;
    this.#publicKey = publicKey;
    this.#options = options;
    this.#hooks = hooks;
    this.#size = start.size ?? { rows: 24, cols: 80 };
  }

  /** The file being written (for logs and tests). */
  get path(): string {
    return join(this.#options.dir, this.#fileName);
  }

  /** With policy `closed`: how to end the process when its recording fails. */
  onFailClosed(kill: () => void): void {
    this.#kill = kill;
  }

  async openFirst(): Promise<void> {
    const fileName = this.#newWriter(null);
    this.#file = await open(join(this.#options.dir, fileName), 'wx', 0o600);
    this.#push(`${this.#writer.headerLine}\n`);
  }

  disable(): void {
    this.#disabled = true;
    this.#queue = [];
    this.#queuedBytes = 0;
  }

  /** Whether the recording stopped (its file could not be opened or written). */
  get disabled(): boolean {
    return this.#disabled;
  }

  output(stream: OutputStream, chunk: Buffer): void {
    if (this.#admit(chunk.length)) this.#enqueue(this.#writer.output(stream, chunk));
  }

  input(chunk: Buffer, from: string): void {
    if (this.#admit(chunk.length)) this.#enqueue(this.#writer.input(chunk, from));
  }

  resize(rows: number, cols: number): void {
    this.#size = { rows, cols };
    if (this.#admit(0)) this.#enqueue(this.#writer.resize(cols, rows));
  }

  /** Always recorded (a few bytes past the bound at most): a recording says how its process ended. */
  exit(exitCode: number): void {
    if (this.#admit(0, true)) this.#enqueue(this.#writer.exit(exitCode));
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (!this.#disabled) this.#push(this.#writer.seal());
    this.#done = this.#finish();
    void this.#done.then(() => this.#hooks.gone(this));
  }

  /** The periodic seal (Recordings' timer), when something new is unsealed and nothing is being dropped. */
  sealIfDue(): void {
    if (this.#closed || this.#disabled || this.#writer.unsealed === 0) return;
    this.#push(this.#writer.seal());
  }

  /** Resolves once everything queued is written and, once closed, the file is closed. */
  finished(): Promise<void> {
    return this.#done ?? this.#flushed();
  }

  async #flushed(): Promise<void> {
    while (this.#writing) await this.#writing;
  }

  async #finish(): Promise<void> {
    await this.#flushed();
    const file = this.#file;
    this.#file = null;
    await file?.close().catch(() => undefined);
    // A process that never ran (its start refused or failed) leaves no recording.
    if (this.#writer.events === 0 && this.#part === 1) await unlink(this.path).catch(() => undefined);
  }

  /**
   * Whether an event of `payloadBytes` fits the queue, decided before the event is made (a made event is a link
   * of the chain, which a dropped one must not be). What does not fit follows the policy: dropped and counted
   * (a `tether.gap` event says how much once there is room), or the process ended.
   */
  #admit(payloadBytes: number, always = false): boolean {
    if (this.#closed || this.#disabled) return false;
    // An event's line: its payload JSON-escaped (UTF-8 text mostly as is) and some 60 bytes of framing.
    const estimate = payloadBytes + 64;
    if (always || this.#queuedBytes + estimate <= this.#options.queueBytes) {
      if (this.#droppedBytes > 0) {
        const dropped = this.#droppedBytes;
        this.#droppedBytes = 0;
        this.#enqueue(this.#writer.gap(dropped));
      }
      return true;
    }
    // The disk is slower than the process: never wait for it.
    this.#hooks.metrics?.recordingDropped(payloadBytes);
    if (this.#options.failurePolicy === 'closed') {
      this.#fail('the recording could not keep up (its queue is full)', 'queue_full');
      return false;
    }
    this.#droppedBytes += Math.max(payloadBytes, 1);
    return false;
  }

  #enqueue(text: string): void {
    this.#push(text);
    // Decided as events are made (not as they are written), so that every line of a part is its chain's.
    if (
      this.#partBytes >= this.#options.maxFileBytes ||
      Date.now() - this.#partStartedMs >= this.#options.maxFileAgeMs
    ) {
      this.#nextPart();
    }
  }

  #push(text: string): void {
    if (text === '') return;
    this.#queue.push(text);
    this.#queuedBytes += text.length;
    this.#partBytes += text.length;
    this.#writing ??= this.#drain();
  }

  /** Seals this part and starts the next, whose header names this part and its chain head. */
  #nextPart(): void {
    this.#push(this.#writer.seal());
    const previous = { file: this.#fileName, head: this.#writer.head };
    this.#part++;
    const fileName = this.#newWriter(previous);
    this.#queue.push({ fileName });
    this.#push(`${this.#writer.headerLine}\n`);
  }

  async #drain(): Promise<void> {
    try {
      while (this.#queue.length > 0 && !this.#disabled) {
        const at = this.#queue.findIndex((item) => typeof item !== 'string');
        const texts = (at < 0 ? this.#queue.splice(0) : this.#queue.splice(0, at)) as string[];
        if (texts.length > 0) {
          const bytes = Buffer.from(texts.join(''));
          this.#queuedBytes = Math.max(0, this.#queuedBytes - bytes.length);
          await this.#file!.write(bytes);
          this.#hooks.metrics?.recordingWritten(bytes.length);
          continue;
        }
        const { fileName } = this.#queue.shift() as { fileName: string };
        await this.#file!.close();
        this.#file = await open(join(this.#options.dir, fileName), 'wx', 0o600);
      }
    } catch (err) {
      this.#fail(`writing ${this.path} failed: ${(err as Error).message}`, 'write');
    } finally {
      this.#writing = null;
      if (this.#queue.length > 0 && !this.#disabled) this.#writing = this.#drain();
    }
  }

  /** A writer for the next part (its name becomes the current one); the file is opened by the write loop. */
  #newWriter(previous: { file: string; head: string } | null): string {
    const stamp = this.#startedAt.toISOString().replace(/[:.]/g, '-');
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
    );
    return this.#fileName;
  }

  #fail(why: string, cause: 'write' | 'queue_full'): void {
    if (this.#disabled) return;
    this.disable();
    this.#hooks.metrics?.recordingFailed(this.#options.failurePolicy, cause);
    if (this.#options.failurePolicy === 'closed') {
      this.#hooks.problem(`${why}: process ${this.#start.processId} is ended (--record-failure closed)`);
      this.#kill?.();
    } else {
      this.#hooks.problem(`${why}: process ${this.#start.processId} goes on unrecorded (--record-failure open)`);
    }
  }
}
