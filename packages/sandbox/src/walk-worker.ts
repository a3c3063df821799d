/**
 * The Sandboxer's walk thread (walk-thread.ts starts it, from the package's dist or beside a bundle): runs the
 * policy's walks of the disk, deny globs and nested protected names, synchronously here, so that the executor's
 * event loop goes on serving its other sessions meanwhile. One request at a time, answered in order.
 */
import { parentPort } from 'node:worker_threads';
import { expandGlob, GlobExpansionError } from './glob.js';
import { findNestedProtected, type ResolvedEntry, SandboxPolicyError, type ScanLimits } from './policy.js';

/** A walk to run. */
export type WalkOp =
  | { op: 'glob'; pattern: string; maxDepth: number | null }
  | { op: 'nested'; root: string; entries: Map<string, ResolvedEntry>; limits?: ScanLimits };

/** A walk and the id its answer carries. */
export type WalkRequest = WalkOp & { id: number };

/** The error's class travels as `kind`, so that the caller throws what the walk on its own thread would. */
export type WalkAnswer =
  | { id: number; paths: string[] }
  | { id: number; error: { kind: 'glob' | 'policy' | 'other'; message: string } };

const port = parentPort!;

port.on('message', (request: WalkRequest) => {
  let answer: WalkAnswer;
  try {
    const paths =
      request.op === 'glob'
        ? expandGlob(request.pattern, request.maxDepth)
        : findNestedProtected(request.root, request.entries, request.limits);
    answer = { id: request.id, paths };
  } catch (err) {
    const kind = err instanceof GlobExpansionError ? 'glob' : err instanceof SandboxPolicyError ? 'policy' : 'other';
    answer = { id: request.id, error: { kind, message: (err as Error).message } };
  }
  port.postMessage(answer);
});
