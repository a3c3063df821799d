import { createHash, randomBytes } from 'node:crypto';
import {
  DEFAULT_MAX_DETACHED_PROCESSES,
  detachedProcessIdProblem,
  MAX_PARTICIPANTS,
  type Participant,
  type ShareAccess,
} from '@tether/exec-protocol';
import {
  ProcessError,
  type ProcessEvent,
  type ProcessSummary,
  ProcessTable,
  type ProcessTableOptions,
  type StartRequest,
  type StartResult,
} from '@tether/local-process';
import { DEFAULT_DETACHED_EXITED_RETENTION_MS } from './config.js';
import type { Logger } from './logger.js';
import { ExecutorMetrics, secondsSince } from './metrics.js';
import {
  mayAccess,
  type Principal,
  type ProcessAction,
  principalKey,
  principalLabel,
  samePrincipal,
} from './principal.js';

/** A session that follows detached processes (`process/attach`). */
export interface DetachedWatcher {
  /** One event of a watched process; best effort (dropped while the watcher's connection is congested or gone). */
  deliverDetached(event: ProcessEvent): void;
  /** A share it followed `processId` by was revoked or expired: the process is gone to it. */
  accessRevoked(processId: string): void;
  /** Who follows `processId` now (`process/participants`), as this watcher's principal sees it. */
  participantsChanged(processId: string, participants: Participant[]): void;
}

/** Live shares per process, and in all (each a token's hash and a few fields). */
const MAX_SHARES_PER_PROCESS = 16;
const MAX_SHARES = 1024;

interface Share {
  readonly shareId: string;
  readonly processId: string;
  readonly access: ShareAccess;
  readonly expiresAtMs: number;
  /** Revoked, or swept once expired. */
  ended: boolean;
}

/** What a principal that came in by a share may do: its share decides (it ends with it). */
interface Grant {
  readonly share: Share;
  readonly who: Principal;
}

export interface DetachedProcessesOptions {
  /** The sessions' table options (retention, reaper, read buffers); flow control and its budget do not apply. */
  tableOptions: Omit<ProcessTableOptions, 'onEvent' | 'maxProcesses' | 'exitedRetentionMs' | 'outputBudget'>;
  /** Detached processes at once, in any state (`--max-detached-processes`). Default 64. */
  maxProcesses?: number;
  /** How long a closed detached process stays readable. Default 10 minutes. */
  exitedRetentionMs?: number;
  /** Whether some session of the executor has a process with this id (ids are unique executor-wide). */
  usedBySession: (processId: string) => boolean;
  logger: Logger;
  metrics?: ExecutorMetrics;
  /** The clock shares expire by; default Date.now. */
  now?: () => number;
}

/**
 * The executor's detached processes (capability `processDetach`, exec-protocol's detached.ts): one process
 * table that belongs to the executor, not to a session, so its processes outlive the session that started
 * them. Each is owned by the principal whose session started it (principal.ts): a session reaches it by id
 * only where `mayAccess` allows, and to any other it is an unknown id. Owned by the SessionRegistry, ended at
 * its shutdown.
 *
 * Output is retained as for any process (the ring of `retainedOutputBytes` per process, oldest dropped first)
 * and read with `process/read`. A detached process is never flow-controlled and never paused for a slow
 * reader: nobody may be reading it, and one attacher must not hold the others (or the child) back. So when
 * its output outruns every audience, the oldest retained output is dropped; readers see the missing seqs.
 */
export class DetachedProcesses {
  readonly table: ProcessTable;
  readonly maxProcesses: number;
  private readonly usedBySession: (processId: string) => boolean;
  private readonly logger: Logger;
  private readonly metrics: ExecutorMetrics;
  /** Sessions following each process, until its close (bounded by the sessions of the executor), by principal. */
  private readonly watchers = new Map<string, Map<DetachedWatcher, Principal>>();
  /** Live shares by the SHA-256 of their token (the token itself is never kept). */
  private readonly shares = new Map<string, Share>();
  /** Per process, the principals a share let in (by principalKey), until the share ends. */
  private readonly grants = new Map<string, Map<string, Grant>>();
  /** Each live share's expiry timer (cleared when it ends, and at shutdown). */
  private readonly expiries = new Map<Share, NodeJS.Timeout>();
  /** The clock shares expire by (tests may turn it). */
  private readonly now: () => number;
  /** Start times of the processes not yet exited (process metrics). */
  private readonly running = new Map<string, number>();
  /**
   * Who started each process (the table's ids, plus ids it has since evicted until the next start sweeps
   * them: bounded by `maxProcesses` and one sweep's worth).
   */
  private readonly owners = new Map<string, Principal>();

  constructor(options: DetachedProcessesOptions) {
    this.usedBySession = options.usedBySession;
    this.logger = options.logger;
    this.metrics = options.metrics ?? new ExecutorMetrics();
    this.maxProcesses = options.maxProcesses ?? DEFAULT_MAX_DETACHED_PROCESSES;
    this.now = options.now ?? Date.now;
    this.table = new ProcessTable({
      ...options.tableOptions,
      maxProcesses: this.maxProcesses,
      exitedRetentionMs: options.exitedRetentionMs ?? DEFAULT_DETACHED_EXITED_RETENTION_MS,
      onEvent: (event) => this.onEvent(event),
    });
  }

  /** Whether a detached process has this id, whoever owns it (ids are unique executor-wide). */
  has(processId: string): boolean {
    return this.table.has(processId);
  }

  /**
   * Whether `who` may do `action` to the detached process `processId`: the only access check of detached
   * processes (principal.ts's `mayAccess`). False for an unknown id, so callers answer both alike.
   */
  allows(processId: string, who: Principal, action: ProcessAction): boolean {
    if (!this.table.has(processId)) return false;
    const owner = this.owners.get(processId);
    if (owner !== undefined && mayAccess(owner, who, action)) return true;
    const grant = this.grants.get(processId)?.get(principalKey(who));
    if (grant === undefined || !this.live(grant.share)) return false;
    if (action !== 'control') return true;
    // A view-only key controls nothing, even by a control share.
    return grant.share.access === 'control' && !(who.kind === 'key' && who.viewOnly === true);
  }

  /**
   * `process/share`: a token that lets another principal attach to `processId` with `access`, until `ttlMs` is
   * over or the share is revoked. Only who may reach the process by ownership shares it (owner, local, admin),
   * never who came in by a share.
   */
  share(
    processId: string,
    who: Principal,
    access: ShareAccess,
    ttlMs: number,
  ): { token: string; shareId: string; expiresAtMs: number } {
    const owner = this.owners.get(processId);
    if (!this.table.has(processId) || owner === undefined || !mayAccess(owner, who, 'control')) {
      throw new ProcessError('unknown_process', `unknown process id ${processId}`);
    }
    this.sweepShares();
    const ofProcess = [...this.shares.values()].filter((share) => share.processId === processId).length;
    if (ofProcess >= MAX_SHARES_PER_PROCESS || this.shares.size >= MAX_SHARES) {
      throw new ProcessError(
        'too_many_processes',
        `too many shares: at most ${MAX_SHARES_PER_PROCESS} per process and ${MAX_SHARES} in all (revoke some with process/unshare)`,
      );
    }
    const token = `tsh_${randomBytes(32).toString('base64url')}`;
    const hash = tokenHash(token);
    const share: Share = {
      shareId: hash.slice(0, 12),
      processId,
      access,
      expiresAtMs: this.now() + ttlMs,
      ended: false,
    };
    this.shares.set(hash, share);
    // At its expiry the sessions that came in by it are told at once (not at the next look at the shares).
    const timer = setTimeout(() => {
      if (!share.ended) this.endShare(hash, share);
    }, ttlMs);
    timer.unref();
    this.expiries.set(share, timer);
    return { token, shareId: share.shareId, expiresAtMs: share.expiresAtMs };
  }

  /**
   * `process/unshare`: revokes `shareId` (every share of the process without it). The sessions that followed
   * the process by it stop at once and are told. Answers how many shares ended.
   */
  unshare(processId: string, who: Principal, shareId?: string): number {
    const owner = this.owners.get(processId);
    if (!this.table.has(processId) || owner === undefined || !mayAccess(owner, who, 'control')) {
      throw new ProcessError('unknown_process', `unknown process id ${processId}`);
    }
    let revoked = 0;
    for (const [hash, share] of this.shares) {
      if (share.processId !== processId || (shareId !== undefined && share.shareId !== shareId)) continue;
      this.endShare(hash, share);
      revoked++;
    }
    return revoked;
  }

  /** `process/attach {shareToken}`: `who` may reach the process as the share says (a bad token: unknown id). */
  redeem(processId: string, token: string, who: Principal): void {
    const share = this.shares.get(tokenHash(token));
    if (share === undefined || share.processId !== processId || !this.live(share) || !this.table.has(processId)) {
      throw new ProcessError('unknown_process', `unknown process id ${processId}`);
    }
    let grants = this.grants.get(processId);
    if (grants === undefined) {
      grants = new Map();
      this.grants.set(processId, grants);
    }
    const key = principalKey(who);
    const held = grants.get(key);
    // A second token never lowers what a principal holds (control stays control).
    if (held === undefined || !this.live(held.share) || held.share.access === 'view') grants.set(key, { share, who });
    // Its sessions already following may have gained control.
    if (held !== undefined && held.share.access !== share.access) this.announce(processId);
  }

  /**
   * Who follows `processId` (its watchers, one entry per principal), as `viewer` is told it: each with its access
   * now, whether it owns the process, and whether it is `viewer`.
   */
  participantsOf(processId: string, viewer: Principal): Participant[] {
    const owner = this.owners.get(processId);
    const byPrincipal = new Map<string, { who: Principal; sessions: number }>();
    for (const who of this.watchers.get(processId)?.values() ?? []) {
      const key = principalKey(who);
      const entry = byPrincipal.get(key);
      if (entry === undefined) byPrincipal.set(key, { who, sessions: 1 });
      else entry.sessions++;
    }
    const viewerKey = principalKey(viewer);
    return [...byPrincipal]
      .map(
        ([key, { who, sessions }]): Participant => ({
          who: principalLabel(who),
          access: this.allows(processId, who, 'control') ? 'control' : 'view',
          owner: owner !== undefined && samePrincipal(owner, who),
          sessions,
          you: key === viewerKey,
        }),
      )
      .slice(0, MAX_PARTICIPANTS);
  }

  /** Tells every session following `processId` who follows it now. */
  private announce(processId: string): void {
    const set = this.watchers.get(processId);
    if (set === undefined) return;
    for (const [watcher, who] of set) watcher.participantsChanged(processId, this.participantsOf(processId, who));
  }

  /** The live shares of `processId`, with how many sessions follow it by each (its owner's `process/list`). */
  sharesOf(processId: string): Array<{ shareId: string; access: ShareAccess; expiresAtMs: number; attached: number }> {
    this.sweepShares();
    const grants = [...(this.grants.get(processId)?.values() ?? [])];
    const watching = [...(this.watchers.get(processId)?.values() ?? [])].map(principalKey);
    return [...this.shares.values()]
      .filter((share) => share.processId === processId)
      .map((share) => ({
        shareId: share.shareId,
        access: share.access,
        expiresAtMs: share.expiresAtMs,
        attached: watching.filter((key) =>
          grants.some((grant) => grant.share === share && principalKey(grant.who) === key),
        ).length,
      }));
  }

  private live(share: Share): boolean {
    return !share.ended && share.expiresAtMs > this.now();
  }

  /** Ends the shares past their time (their sessions told), and those of processes gone. */
  private sweepShares(): void {
    for (const [hash, share] of this.shares) {
      if (share.expiresAtMs <= this.now() || !this.table.has(share.processId)) this.endShare(hash, share);
    }
  }

  private endShare(hash: string, share: Share): void {
    share.ended = true;
    this.shares.delete(hash);
    clearTimeout(this.expiries.get(share));
    this.expiries.delete(share);
    const grants = this.grants.get(share.processId);
    if (grants === undefined) return;
    for (const [key, grant] of grants) {
      if (grant.share !== share) continue;
      grants.delete(key);
      // Its sessions lose the process (unless they may reach it otherwise).
      const watchers = this.watchers.get(share.processId);
      for (const [watcher, who] of watchers ?? []) {
        if (principalKey(who) !== key || this.allows(share.processId, who, 'attach')) continue;
        watchers!.delete(watcher);
        watcher.accessRevoked(share.processId);
      }
    }
    if (grants.size === 0) this.grants.delete(share.processId);
    this.announce(share.processId);
  }

  get size(): number {
    return this.table.size;
  }

  /**
   * Starts a detached process. The id must be plain (DETACHED_PROCESS_ID_PATTERN) and unused by every
   * session; the start is refused with `too_many_processes` at the limit. Never flow-controlled.
   */
  async start(request: StartRequest, owner: Principal): Promise<StartResult> {
    const { processId } = request;
    const problem = detachedProcessIdProblem(processId);
    if (problem !== null) throw new ProcessError('invalid_argument', problem);
    // Checked and reserved in one turn (ProcessTable.start reserves synchronously): no start can slip between.
    if (this.table.has(processId) || this.usedBySession(processId)) {
      throw new ProcessError('already_exists', `process ${processId} already exists`);
    }
    if (this.table.size >= this.maxProcesses) {
      throw new ProcessError(
        'too_many_processes',
        `too many detached processes: the limit is ${this.maxProcesses} (executor --max-detached-processes; exited ones count until they are evicted)`,
      );
    }
    for (const id of this.owners.keys()) if (!this.table.has(id)) this.owners.delete(id);
    // A new process under an id used before: nothing shared of the old one reaches it.
    for (const [hash, share] of this.shares) if (share.processId === processId) this.endShare(hash, share);
    this.owners.set(processId, owner);
    this.metrics.processStarting();
    this.running.set(processId, performance.now());
    try {
      const started = await this.table.start({ ...request, flowWindowBytes: null });
      this.logger.info({ processId, pid: started.pid }, 'detached process started');
      return started;
    } catch (err) {
      if (this.running.delete(processId)) this.metrics.processStartFailed();
      if (!this.table.has(processId)) this.owners.delete(processId);
      throw err;
    }
  }

  /**
   * `process/attach`: `watcher` gets the process's notifications from now on, until the process closes or
   * the watcher is forgotten. Idempotent. Returns the process's list entry. A process `who` may not attach to
   * is an unknown id.
   */
  watch(processId: string, watcher: DetachedWatcher, who: Principal): ProcessSummary & { detached: true } {
    const summary = this.allows(processId, who, 'attach')
      ? this.table.list().find((entry) => entry.processId === processId)
      : undefined;
    if (summary === undefined) throw new ProcessError('unknown_process', `unknown process id ${processId}`);
    // A closed process has no more events to send.
    if (summary.state !== 'closed') {
      let set = this.watchers.get(processId);
      if (set === undefined) {
        set = new Map();
        this.watchers.set(processId, set);
      }
      set.set(watcher, who);
      this.announce(processId);
    }
    return { ...summary, detached: true };
  }

  /** The watcher (a session) ended: it follows nothing any more (the others are told). */
  forget(watcher: DetachedWatcher): void {
    for (const [processId, set] of this.watchers) {
      if (!set.delete(watcher)) continue;
      if (set.size === 0) this.watchers.delete(processId);
      else this.announce(processId);
    }
  }

  /** The detached processes `who` may list. */
  list(who: Principal): Array<ProcessSummary & { detached: true; shares?: ReturnType<DetachedProcesses['sharesOf']> }> {
    return this.table
      .list()
      .filter((entry) => this.allows(entry.processId, who, 'list'))
      .map((entry) => {
        const owner = this.owners.get(entry.processId);
        // Its shares, to whoever may share it.
        const shares = owner !== undefined && mayAccess(owner, who, 'control') ? this.sharesOf(entry.processId) : [];
        return { ...entry, detached: true as const, ...(shares.length > 0 ? { shares } : {}) };
      });
  }

  /** `process/terminate` of a detached process. */
  terminate(processId: string): { running: boolean } {
    return this.table.terminate(processId);
  }

  /** Kills every detached process and waits until they are gone (executor shutdown). Idempotent. */
  async shutdown(): Promise<void> {
    this.watchers.clear();
    for (const timer of this.expiries.values()) clearTimeout(timer);
    this.expiries.clear();
    this.shares.clear();
    this.grants.clear();
    await this.table.shutdown();
  }

  private onEvent(event: ProcessEvent): void {
    if (event.kind === 'exited') {
      const startedAt = this.running.get(event.processId);
      if (startedAt !== undefined) {
        this.running.delete(event.processId);
        this.metrics.processFinished(event.exitCode === 0 ? 'success' : 'error', secondsSince(startedAt));
      }
      this.logger.info({ processId: event.processId, exitCode: event.exitCode }, 'detached process exited');
    }
    const set = this.watchers.get(event.processId);
    if (set !== undefined) for (const watcher of set.keys()) watcher.deliverDetached(event);
    if (event.kind === 'closed') this.watchers.delete(event.processId);
  }
}

/** A token's SHA-256 (hex): what is kept of it. */
function tokenHash(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}
