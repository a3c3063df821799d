/**
 * `--record-dir DIR`: every process session this executor runs (PTY and pipes, attached or detached) is written
 * to DIR as asciicast v2, hash-chained and sealed with the executor's recording key (@tether/recording). The
 * relay never sees a session in the clear, so the executor is the one place that can record it.
 *
 * - The key: DIR/recording-key.pem (Ed25519, 0600, made on first use) and its public half DIR/recording-key.pub
 *   (`ed25519:BASE64`), which `harness recording verify` trusts when it finds it beside a recording.
 * - Files: DIR/<UTC start>-<process id>.cast, mode 0600; a session past `maxFileBytes` or `maxFileAgeMs` goes on
 *   in `….part2.cast` (its header names the part before and that part's chain head).
 * - Never slows a process: the executor's thread copies each event's bytes and posts them, in batches, to one
 *   recording worker thread, which makes the lines, hashes, seals and writes them (recording-file.ts); at most
 *   `queueBytes` per recording are on their way at once. Seals every `sealEveryMs` while there is something new,
 *   and at the end.
 * - When the disk is full, failing or slower than the output: `failurePolicy` `open` keeps the process running,
 *   drops what does not fit (a `tether.gap` event says how much, once there is room) or stops recording it after
 *   a write error; `closed` ends the process (SIGKILL of its group, as a terminate) and refuses new starts whose
 *   recording cannot be opened. Both counted in /metrics.
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { OutputStream, RecordingSink } from '@tether/local-process';
import { publicKeyText } from '@tether/recording';
import { DEFAULT_CONFIG, type ExecutorConfig } from './config.js';
import type { ExecutorMetrics } from './metrics.js';
import type { RecordingEvent, RecordingFileStart } from './recording-file.js';
import type { FromWorker, RecordingWorkerData, ToWorker } from './recording-worker.js';

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

/** How often a recording with new events is sealed. */
const SEAL_EVERY_MS = 1_000;

/** The recording options of an executor's config (`[recording]`, `--record-dir`, `--record-failure`). */
export function recordingOptions(config: ExecutorConfig, dir: string): RecordingOptions {
  return {
    dir,
    failurePolicy: config.recordFailure,
    maxFileBytes: config.recordMaxFileBytes,
    maxFileAgeMs: config.recordMaxFileAgeMs,
    queueBytes: config.recordQueueBytes,
    sealEveryMs: SEAL_EVERY_MS,
  };
}

/** The defaults (the config's), for a directory of one's own. */
export const DEFAULT_RECORDING_OPTIONS: Omit<RecordingOptions, 'dir'> = recordingOptions(DEFAULT_CONFIG, '');

/** A process about to start, as its recording's header names it (the worker adds when). */
export type RecordingStart = Omit<RecordingFileStart, 'startedAtMs'>;

/** The recording directory or its key cannot be used (the executor does not start). */
export class RecordDirError extends Error {}

/** Refused start: the policy is `closed` and the recording could not be opened. */
export class RecordingUnavailableError extends Error {}

export class Recordings {
  readonly options: RecordingOptions;
  readonly publicKey: string;
  readonly #metrics: ExecutorMetrics | null;
  readonly #onProblem: (message: string) => void;
  readonly #worker: Worker;
  readonly #active = new Map<number, ProcessRecording>();
  readonly #opening = new Map<number, { resolve: (path: string) => void; reject: (err: Error) => void }>();
  #nextId = 1;
  /** Events posted at the end of this turn, in one message (a stream's chunks come many per turn). */
  #batch: Array<[number, RecordingEvent]> = [];
  #transfer: ArrayBuffer[] = [];
  #flushScheduled = false;
  #closed: Promise<void> | null = null;
  #workerGone = false;

  /** Opens (or makes) DIR and its key, and starts the worker; throws RecordDirError naming DIR when it cannot. */
  constructor(
    options: RecordingOptions,
    metrics: ExecutorMetrics | null = null,
    onProblem: (message: string) => void = () => undefined,
  ) {
    this.options = options;
    this.#metrics = metrics;
    this.#onProblem = onProblem;
    let key: KeyObject;
    try {
      mkdirSync(options.dir, { recursive: true, mode: 0o700 });
      key = loadOrMakeKey(options.dir);
    } catch (err) {
      throw new RecordDirError(`--record-dir ${options.dir}: ${(err as Error).message}`);
    }
    this.publicKey = publicKeyText(createPublicKey(key));
    const workerData: RecordingWorkerData = {
      dir: options.dir,
      keyPem: key.export({ format: 'pem', type: 'pkcs8' }).toString(),
      publicKey: this.publicKey,
      maxFileBytes: options.maxFileBytes,
      maxFileAgeMs: options.maxFileAgeMs,
      sealEveryMs: options.sealEveryMs,
    };
    // The built worker, also when the executor runs from its sources (tests): a worker gets no TypeScript loader,
    // and none of the executor's flags (its source condition among them).
    this.#worker = new Worker(workerScript(), { workerData, execArgv: [] });
    this.#worker.on('message', (message: FromWorker) => this.#onWorker(message));
    // A worker gone (an error, or killed) writes nothing more: every recording follows the policy, and none is
    // waited for.
    const gone = (why: string) => {
      if (this.#workerGone) return;
      this.#workerGone = true;
      if (this.#closed === null) this.#onProblem(why);
      for (const recording of this.#active.values()) {
        recording.workerFailed(why);
        recording.closedByWorker();
      }
      this.#active.clear();
      for (const opening of this.#opening.values()) opening.reject(new Error(why));
      this.#opening.clear();
      this.#refresh();
    };
    this.#worker.on('error', (err) => gone(`the recording worker failed: ${err.message}`));
    this.#worker.on('exit', () => gone('the recording worker exited'));
    this.#worker.unref();
    metrics?.recordingsActive(() => this.#active.size);
  }

  /**
   * A recording for a process about to start, its file open. A file that cannot be opened follows the policy
   * (`closed`: this throws RecordingUnavailableError; `open`: the process runs unrecorded).
   */
  async begin(start: RecordingStart): Promise<ProcessRecording> {
    if (this.#closed) throw new RecordingUnavailableError('the executor is shutting down');
    const id = this.#nextId++;
    const recording = new ProcessRecording(id, start, this.options, {
      post: (event, transfer) => this.#post(id, event, transfer),
      close: () => this.#send({ kind: 'close', id }),
      metrics: this.#metrics,
      problem: (message) => this.#onProblem(message),
    });
    if (this.#workerGone) {
      this.#metrics?.recordingFailed(this.options.failurePolicy, 'open');
      if (this.options.failurePolicy === 'closed') throw new RecordingUnavailableError('the recording worker is gone');
      recording.disable();
      return recording;
    }
    const opened = new Promise<string>((resolve, reject) => this.#opening.set(id, { resolve, reject }));
    this.#refresh();
    this.#send({ kind: 'open', id, start: { ...start, startedAtMs: Date.now() } });
    try {
      recording.path = await opened;
      this.#active.set(id, recording);
      this.#refresh();
    } catch (err) {
      this.#refresh();
      this.#metrics?.recordingFailed(this.options.failurePolicy, 'open');
      const why = `cannot record process ${start.processId} in ${this.options.dir}: ${(err as Error).message}`;
      this.#onProblem(why);
      if (this.options.failurePolicy === 'closed') throw new RecordingUnavailableError(why);
      recording.disable();
    }
    return recording;
  }

  /** Seals and writes what every recording holds (after the last process: nothing new comes), then stops the worker. */
  close(): Promise<void> {
    this.#closed ??= this.#shutdown();
    return this.#closed;
  }

  async #shutdown(): Promise<void> {
    for (const recording of this.#active.values()) recording.close();
    this.#flush();
    await Promise.all([...this.#active.values()].map((recording) => recording.finished()));
    await this.#worker.terminate();
  }

  /** The worker keeps the executor alive only while it has recordings to finish (an idle one never does). */
  #refresh(): void {
    if (this.#active.size > 0 || this.#opening.size > 0) this.#worker.ref();
    else this.#worker.unref();
  }

  #post(id: number, event: RecordingEvent, transfer: ArrayBuffer | null): void {
    this.#batch.push([id, event]);
    if (transfer) this.#transfer.push(transfer);
    if (!this.#flushScheduled) {
      this.#flushScheduled = true;
      setImmediate(() => this.#flush());
    }
  }

  #flush(): void {
    this.#flushScheduled = false;
    if (this.#batch.length === 0) return;
    const message: ToWorker = { kind: 'events', batch: this.#batch };
    const transfer = this.#transfer;
    this.#batch = [];
    this.#transfer = [];
    this.#worker.postMessage(message, transfer);
  }

  #send(message: ToWorker): void {
    // In order after the events posted before it.
    this.#flush();
    this.#worker.postMessage(message);
  }

  #onWorker(message: FromWorker): void {
    switch (message.kind) {
      case 'opened':
        this.#opening.get(message.id)?.resolve(message.path);
        this.#opening.delete(message.id);
        return;
      case 'openFailed':
        this.#opening.get(message.id)?.reject(new Error(message.message));
        this.#opening.delete(message.id);
        return;
      case 'written':
        this.#metrics?.recordingWritten(message.bytes);
        this.#active.get(message.id)?.written(message.cost);
        return;
      case 'failed':
        this.#active.get(message.id)?.workerFailed(message.why);
        return;
      case 'closed':
        this.#active.get(message.id)?.closedByWorker();
        this.#active.delete(message.id);
        this.#refresh();
        return;
    }
  }
}

/** The built worker script: beside this file in dist, or the dist's when this runs from the sources. */
function workerScript(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  const beside = join(here, 'recording-worker.js');
  if (existsSync(beside)) return beside;
  return join(here, '..', 'dist', 'recording-worker.js');
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
  post(event: RecordingEvent, transfer: ArrayBuffer | null): void;
  close(): void;
  metrics: ExecutorMetrics | null;
  problem: (message: string) => void;
}

/** An event's line beyond its payload (time, type, quotes, brackets), as counted against the queue bound. */
const EVENT_FRAMING_BYTES = 64;

/**
 * One process's recording, on the executor's thread: what the process table calls (RecordingSink). Each event's
 * bytes are copied (the table's buffers are pooled) and posted to the worker; at most `queueBytes` are on their
 * way at once, and what does not fit follows the failure policy.
 */
export class ProcessRecording implements RecordingSink {
  readonly #start: RecordingStart;
  readonly #options: RecordingOptions;
  readonly #hooks: RecordingHooks;
  /** The recording's file (once open). */
  path = '';
  #inFlight = 0;
  #droppedBytes = 0;
  #disabled = false;
  #closed = false;
  #kill: (() => void) | null = null;
  #resolveDone!: () => void;
  readonly #done = new Promise<void>((resolve) => {
    this.#resolveDone = resolve;
  });

  constructor(
    readonly id: number,
    start: RecordingStart,
    options: RecordingOptions,
    hooks: RecordingHooks,
  ) {
    this.#start = start;
    this.#options = options;
    this.#hooks = hooks;
  }

  /** With policy `closed`: how to end the process when its recording fails. */
  onFailClosed(kill: () => void): void {
    this.#kill = kill;
  }

  /** Whether the recording stopped (its file could not be opened or written). */
  get disabled(): boolean {
    return this.#disabled;
  }

  disable(): void {
    if (this.#disabled) return;
    this.#disabled = true;
    if (this.path === '') this.#resolveDone();
  }

  output(stream: OutputStream, chunk: Buffer): void {
    if (!this.#admit(chunk.length)) return;
    const data = copy(chunk);
    const cost = chunk.length + EVENT_FRAMING_BYTES;
    this.#hooks.post({ kind: 'output', at: Date.now(), stream, data, cost }, data.buffer as ArrayBuffer);
  }

  input(chunk: Buffer, from: string): void {
    if (!this.#admit(chunk.length)) return;
    const data = copy(chunk);
    const cost = chunk.length + EVENT_FRAMING_BYTES;
    this.#hooks.post({ kind: 'input', at: Date.now(), from, data, cost }, data.buffer as ArrayBuffer);
  }

  resize(rows: number, cols: number): void {
    if (this.#admit(0))
      this.#hooks.post({ kind: 'resize', at: Date.now(), rows, cols, cost: EVENT_FRAMING_BYTES }, null);
  }

  /** Always recorded (a few bytes past the bound at most): a recording says how its process ended. */
  exit(exitCode: number): void {
    if (this.#admit(0, true))
      this.#hooks.post({ kind: 'exit', at: Date.now(), code: exitCode, cost: EVENT_FRAMING_BYTES }, null);
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    // A recording never opened has nothing to close; one that failed still closes its file.
    if (this.path === '') this.#resolveDone();
    else this.#hooks.close();
  }

  /** Resolves once the recording's last line is written and its file closed. */
  finished(): Promise<void> {
    return this.#done;
  }

  /** The worker wrote events of this cost: room for more. */
  written(cost: number): void {
    this.#inFlight = Math.max(0, this.#inFlight - cost);
  }

  closedByWorker(): void {
    this.#resolveDone();
  }

  /** The worker could not write the file: the policy decides what happens to the process. */
  workerFailed(why: string): void {
    this.#fail(why, 'write');
  }

  /**
   * Whether an event of `payloadBytes` fits the queue bound. What does not fit follows the policy: dropped and
   * counted (a `tether.gap` event says how much once there is room), or the process ended.
   */
  #admit(payloadBytes: number, always = false): boolean {
    if (this.#closed || this.#disabled) return false;
    const cost = payloadBytes + EVENT_FRAMING_BYTES;
    if (always || this.#inFlight + cost <= this.#options.queueBytes) {
      if (this.#droppedBytes > 0) {
        const bytes = this.#droppedBytes;
        this.#droppedBytes = 0;
        this.#inFlight += EVENT_FRAMING_BYTES;
        this.#hooks.post({ kind: 'gap', at: Date.now(), bytes, cost: EVENT_FRAMING_BYTES }, null);
      }
      this.#inFlight += cost;
      return true;
    }
    // The disk (or the worker) is slower than the process: never wait for it.
    this.#hooks.metrics?.recordingDropped(payloadBytes);
    if (this.#options.failurePolicy === 'closed') {
      this.#fail('the recording could not keep up (its queue is full)', 'queue_full');
      return false;
    }
    this.#droppedBytes += Math.max(payloadBytes, 1);
    return false;
  }

  #fail(why: string, cause: 'write' | 'queue_full'): void {
    if (this.#disabled) return;
    this.#disabled = true;
    this.#hooks.metrics?.recordingFailed(this.#options.failurePolicy, cause);
    if (this.#options.failurePolicy === 'closed') {
      this.#hooks.problem(`${why}: process ${this.#start.processId} is ended (--record-failure closed)`);
      this.#kill?.();
    } else {
      this.#hooks.problem(`${why}: process ${this.#start.processId} goes on unrecorded (--record-failure open)`);
    }
  }
}

/** The bytes in an ArrayBuffer of their own, to be transferred to the worker (a pooled chunk is reused). */
function copy(chunk: Buffer): Uint8Array {
  const data = new Uint8Array(chunk.length);
  data.set(chunk);
  return data;
}
