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
 *
 * Sharing (capability `processShare`): the principal that owns a detached process (or the executor's local
 * user, or an admin key) may share it with another principal, who may not reach it otherwise.
 * - `process/share {processId, access: "view" | "control", ttlSec?}` answers `{token, shareId, expiresAtMs}`:
 *   the token is a secret, said once; whoever presents it in `process/attach {processId, shareToken}` may from
 *   then on attach and read the process (`view`), and also write, resize, signal and terminate it (`control`),
 *   until the share expires or is revoked. Several sessions may follow one process at once, each with its role.
 * - `process/unshare {processId, shareId?}` revokes one share (all of the process's without `shareId`): the
 *   sessions that came in by it lose the process at once and get `process/accessRevoked {processId}`.
 * - The owner's `process/list` entries carry `shares` (id, access, expiry, how many sessions follow by it).
 * - `process/participants {processId, participants}` tells every session following a process who follows it, each
 *   principal once (with how many of its sessions, its access, whether it owns the process and whether it is the
 *   recipient), when that changes: an attach, a session gone, a share redeemed or revoked.
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

export const PROCESS_SHARE_CAPABILITY = 'processShare';

/** The longest a share may live (a week); the default is an hour. */
export const MAX_SHARE_TTL_SEC = 7 * 24 * 3600;
export const DEFAULT_SHARE_TTL_SEC = 3600;

export const ShareAccess = Type.Union([Type.Literal('view'), Type.Literal('control')]);
export type ShareAccess = Static<typeof ShareAccess>;

export const ProcessAttachParams = Type.Object({
  processId: Type.String(),
  /** Capability `processShare`: a token from the owner's `process/share`. */
  shareToken: Type.Optional(Type.String({ maxLength: 256 })),
});
export type ProcessAttachParams = Static<typeof ProcessAttachParams>;

/** The attached process, as `process/list` shows it. */
export const ProcessAttachResult = ProcessListEntry;
export type ProcessAttachResult = Static<typeof ProcessAttachResult>;

export const ProcessShareParams = Type.Object({
  processId: Type.String(),
  access: ShareAccess,
  ttlSec: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_SHARE_TTL_SEC })),
});
export type ProcessShareParams = Static<typeof ProcessShareParams>;

export const ProcessShareResult = Type.Object({
  /** The secret, said once. */
  token: Type.String(),
  /** The share's public name (to list and revoke it). */
  shareId: Type.String(),
  expiresAtMs: Type.Integer(),
});
export type ProcessShareResult = Static<typeof ProcessShareResult>;

export const ProcessUnshareParams = Type.Object({
  processId: Type.String(),
  shareId: Type.Optional(Type.String({ maxLength: 64 })),
});
export type ProcessUnshareParams = Static<typeof ProcessUnshareParams>;

export const ProcessUnshareResult = Type.Object({ revoked: Type.Integer({ minimum: 0 }) });
export type ProcessUnshareResult = Static<typeof ProcessUnshareResult>;

/** `process/accessRevoked`: a share this session came in by was revoked (or expired); the process is gone to it. */
/** Most participants a `process/participants` lists (the executor's sessions bound it far below). */
export const MAX_PARTICIPANTS = 256;

/** One principal following a process (`process/participants`). */
export const Participant = Type.Object({
  /** Who: an API key's id (an admin key: `admin ID`), `share link of ID`, `local` or `unattributed`. */
  who: Type.String({ maxLength: 300 }),
  access: ShareAccess,
  /** It started the process (and may share it). */
  owner: Type.Boolean(),
  /** How many of its sessions follow the process. */
  sessions: Type.Integer({ minimum: 1 }),
  /** It is the session this notification went to. */
  you: Type.Boolean(),
});
export type Participant = Static<typeof Participant>;

export const ProcessParticipantsNotification = Type.Object({
  processId: Type.String(),
  participants: Type.Array(Participant, { maxItems: MAX_PARTICIPANTS }),
});
export type ProcessParticipantsNotification = Static<typeof ProcessParticipantsNotification>;

export const ProcessAccessRevokedNotification = Type.Object({ processId: Type.String() });
export type ProcessAccessRevokedNotification = Static<typeof ProcessAccessRevokedNotification>;
