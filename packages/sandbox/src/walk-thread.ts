/**
 * A Walker (policy.ts) whose walks run on a worker thread of their own (walk-worker.ts): the nested search of a
 * writable root lists every directory under it, at each sandboxed start and fs call, and a deny glob may look at
 * 200,000 entries. Listed synchronously on the executor's thread, a workspace of 23,000 entries stopped every
 * other session for 50–170 ms per start; listed through fs/promises, the loop went on but a start took twice as
 * long (a thread-pool hop per directory). Here it takes what the synchronous walk takes, off the loop.
 *
 * Owned by its Sandboxer (closed with it). The thread starts with the first walk and is unref'd while nothing is
 * asked of it. A thread that fails or exits answers what it was asked with an error (the start is refused), and
 * later walks run on the caller's thread: never a walk skipped.
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { GlobExpansionError } from './glob.js';
import { IN_THREAD_WALKER, type ResolvedEntry, SandboxPolicyError, type ScanLimits, type Walker } from './policy.js';
import type { WalkAnswer, WalkOp, WalkRequest } from './walk-worker.js';

type Pending = { resolve: (paths: string[]) => void; reject: (err: Error) => void };

export class WalkThread implements Walker {
  readonly #script: string;
  #worker: Worker | null = null;
  /** Closed, or the thread failed or exited: walks run on the calling thread from then on. */
  #stopped = false;
  #nextId = 1;
  readonly #pending = new Map<number, Pending>();

  /** `script`: the built walk-worker.js (default: beside this module, or the package's dist from its sources). */
  constructor(script: string = walkWorkerScript()) {
    this.#script = script;
  }

  glob(pattern: string, maxDepth: number | null): Promise<string[]> {
    if (this.#stopped) return IN_THREAD_WALKER.glob(pattern, maxDepth);
    return this.#ask({ op: 'glob', pattern, maxDepth });
  }

  nested(root: string, entries: Map<string, ResolvedEntry>, limits?: ScanLimits): Promise<string[]> {
    if (this.#stopped) return IN_THREAD_WALKER.nested(root, entries, limits);
    return this.#ask({ op: 'nested', root, entries, ...(limits ? { limits } : {}) });
  }

  /** Ends the thread; a walk still going is answered with an error. */
  close(): void {
    this.#stopped = true;
    this.#fail('the sandbox is closed');
    void this.#worker?.terminate();
    this.#worker = null;
  }

  #ask(request: WalkOp): Promise<string[]> {
    const worker = this.#thread();
    const id = this.#nextId++;
    const answer = new Promise<string[]>((resolve, reject) => this.#pending.set(id, { resolve, reject }));
    worker.ref();
    worker.postMessage({ ...request, id } as WalkRequest);
    return answer;
  }

  #thread(): Worker {
    if (this.#worker !== null) return this.#worker;
    // No TypeScript loader and none of the executor's flags (its source condition among them): the built script.
    const worker = new Worker(this.#script, { execArgv: [] });
    worker.on('message', (answer: WalkAnswer) => this.#answered(answer));
    const gone = (why: string) => {
      if (this.#worker !== worker) return;
      this.#worker = null;
      this.#stopped = true;
      this.#fail(why);
    };
    worker.on('error', (err) => gone(`the sandbox's walk thread failed: ${err.message}`));
    worker.on('exit', (code) => gone(`the sandbox's walk thread exited (${code})`));
    worker.unref();
    this.#worker = worker;
    return worker;
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
    for (const pending of this.#pending.values()) pending.reject(new Error(why));
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
