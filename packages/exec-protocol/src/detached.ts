/**
 * Detached processes (Tether extension, capability `processDetach`): a process that belongs to the
 * executor instead of the session that started it, so it outlives that session, and any session of the
 * executor can list, read, write, resize, signal or attach to it.
 *
 * On the wire, all additive:
 * - `process/start {detached: true}` starts one (its id must match DETACHED_PROCESS_ID_PATTERN and be
 *   unused by every session of the executor); the answer says `detached: true`. Flow control is not granted
 *   to a detached process: nobody may be reading it, and it must never block on an absent reader.
 * - `process/list` lists the detached processes too, each with `detached: true` (this session's own have
 *   `detached: false`).
 * - `process/attach {processId}` makes the calling session a watcher: the process's `process/output`,
 *   `process/exited` and `process/closed` notifications go to it (best effort, as every notification:
 *   dropped while its connection is congested or gone) until the session ends. What was produced before,
 *   or dropped, is read with `process/read`, as for any process. Answered with the process's list entry.
 * - `process/read`, `process/write`, `process/closeStdin`, `process/resize`, `process/signal` and
 *   `process/terminate` accept a detached process's id from any session.
 */
import { type Static, Type } from '@sinclair/typebox';
import { ProcessListEntry } from './schemas.js';

export const PROCESS_DETACH_CAPABILITY = 'processDetach';

/** Detached processes an executor keeps at once (running, or exited and still retained) by default. */
export const DEFAULT_MAX_DETACHED_PROCESSES = 64;

/**
 * A detached process's id: people type it (`harness attach ID`) and see it in tables, so it is short and
 * plain. Session processes keep Codex's free-form ids.
 */
export const DETACHED_PROCESS_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** Why `processId` cannot name a detached process, or null when it can. */
export function detachedProcessIdProblem(processId: string): string | null {
  if (DETACHED_PROCESS_ID_PATTERN.test(processId)) return null;
  return `a detached process id must be 1 to 64 characters of A-Z a-z 0-9 . _ - (starting with a letter or digit), got ${JSON.stringify(processId.slice(0, 80))}`;
}

export const ProcessAttachParams = Type.Object({ processId: Type.String() });
export type ProcessAttachParams = Static<typeof ProcessAttachParams>;

/** The attached process, as `process/list` shows it. */
export const ProcessAttachResult = ProcessListEntry;
export type ProcessAttachResult = Static<typeof ProcessAttachResult>;
