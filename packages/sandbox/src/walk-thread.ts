/**
 * A Walker (policy.ts) whose walks run on a worker thread of their own (walk-worker.ts): the nested search of a
 * writable root lists every directory under it, at each sandboxed start and fs call, and a deny glob may look at
 * 200,000 entries. Listed synchronously on the executor's thread, a workspace of 23,000 entries stopped every
 * other session for 50–170 ms per start; listed through fs/promises, the loop went on but a start took twice as
 * long (a thread-pool hop per directory). Here it takes what the synchronous walk takes, off the loop.
 *
 * Owned by its Sandboxer (closed with it). The thread starts with the first walk and is unref'd while nothing is
 * asked of it. A thread that fails or exits answers what it was asked with WalkUnavailableError (the start is
 * refused as the executor's fault, not the request's), and later walks run on the caller's thread: never a walk
 * skipped. One that cannot be made at all, or without its built script (sources never built), every walk runs
 * on the caller's thread from the start.
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { GlobExpansionError } from './glob.js';
import {
  IN_THREAD_WALKER,
  type ResolvedEntry,
  SandboxPolicyError,
  type ScanLimits,
  type Walker,
  WalkUnavailableError,
} from './policy.js';
import type { WalkAnswer, WalkOp, WalkRequest } from './walk-worker.js';

type Pending = { resolve: (paths: string[]) => void; reject: (err: Error) => void };

export class WalkThread implements Walker {
  readonly #script: string;
  #worker: Worker | null = null;
  /** Closed, or the thread failed or exited: walks run on the calling thread from then on. */
  #stopped = false;
  #nextId = 1;
  readonly #pending = new Map<number, Pending>();

  readonly #onStart: ((worker: Worker) => void) | undefined;

  /**
   * `script`: the built walk-worker.js (default: beside this module, or the package's dist from its sources).
   * `onStart` sees each thread as it starts (tests watch it end).
   */
  constructor(script: string = walkWorkerScript(), onStart?: (worker: Worker) => void) {
    this.#script = script;
    this.#onStart = onStart;
    this.#stopped = !existsSync(script);
  }

  glob(pattern: string, maxDepth: number | null): Promise<string[]> {
    const here = () => IN_THREAD_WALKER.glob(pattern, maxDepth);
    return this.#stopped ? here() : this.#ask({ op: 'glob', pattern, maxDepth }, here);
  }

  nested(root: string, entries: Map<string, ResolvedEntry>, limits?: ScanLimits): Promise<string[]> {
    const here = () => IN_THREAD_WALKER.nested(root, entries, limits);
    return this.#stopped ? here() : this.#ask({ op: 'nested', root, entries, ...(limits ? { limits } : {}) }, here);
  }

  /** Ends the thread; a walk still going is answered with an error. */
  close(): void {
    this.#stopped = true;
    this.#fail('the sandbox is closed');
    const worker = this.#worker;
    this.#worker = null;
    // Unref'd first: a walk stuck in a hung mount must not keep the executor from exiting while it terminates.
    worker?.unref();
    void worker?.terminate();
  }

  /** Asks the thread for `request`; `here` walks on this thread instead when no thread can be made. */
  #ask(request: WalkOp, here: () => Promise<string[]>): Promise<string[]> {
    const worker = this.#thread();
    if (worker === null) return here();
    const id = this.#nextId++;
    const answer = new Promise<string[]>((resolve, reject) => this.#pending.set(id, { resolve, reject }));
    worker.ref();
    try {
      worker.postMessage({ ...request, id } as WalkRequest);
    } catch (err) {
      // Nothing was sent: no answer will come, so the walk may not stay pending (and the thread ref'd).
      this.#stop(worker, `the sandbox's walk thread could not be asked: ${(err as Error).message}`);
    }
    return answer;
  }

  /** The thread, started by the first walk; null when it cannot start (walks run on the calling thread after). */
  #thread(): Worker | null {
    if (this.#worker !== null) return this.#worker;
    let worker: Worker;
    try {
      // No TypeScript loader and none of the executor's flags (its source condition among them): the built script.
      worker = new Worker(this.#script, { execArgv: [] });
    } catch {
      this.#stopped = true;
      return null;
    }
    worker.on('message', (answer: WalkAnswer) => this.#answered(answer));
    worker.on('messageerror', (err) =>
      this.#stop(worker, `the sandbox's walk thread's answer was lost: ${err.message}`),
    );
    worker.on('error', (err) => this.#stop(worker, `the sandbox's walk thread failed: ${err.message}`));
    worker.on('exit', (code) => this.#stop(worker, `the sandbox's walk thread exited (${code})`));
    worker.unref();
    this.#worker = worker;
    this.#onStart?.(worker);
    return worker;
  }

  /** `worker` (if still this one's) is done for: what it was asked fails, later walks run on the calling thread. */
  #stop(worker: Worker, why: string): void {
    if (this.#worker !== worker) return;
    this.#worker = null;
    this.#stopped = true;
    this.#fail(why);
    worker.unref();
    void worker.terminate();
  }

  #answered(answer: WalkAnswer): void {
    const pending = this.#pending.get(answer.id);
    if (pending === undefined) return;
    this.#pending.delete(answer.id);
    if (this.#pending.size === 0) this.#worker?.unref();
    if ('paths' in answer) {
      pending.resolve(answer.paths);
      return;
    }
    const { kind, message } = answer.error;
    pending.reject(
      kind === 'glob'
        ? new GlobExpansionError(message)
        : kind === 'policy'
          ? new SandboxPolicyError(message)
          : new Error(message),
    );
  }

  #fail(why: string): void {
    for (const pending of this.#pending.values()) pending.reject(new WalkUnavailableError(why));
    this.#pending.clear();
  }
}

/** walk-worker.js beside this module (the package's dist, or an executor bundle), else the dist from the sources. */
export function walkWorkerScript(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  const beside = join(here, 'walk-worker.js');
  if (existsSync(beside)) return beside;
  return join(here, '..', 'dist', 'walk-worker.js');
}
