import { randomUUID } from 'node:crypto';
import { ErrorCode, Notification, type Participant, RpcError, type ShareAccess } from '@tether/exec-protocol';
import type { OutboundAnswer } from '@tether/jsonrpc';
import {
  ProcessError,
  type ProcessEvent,
  type ProcessSummary,
  ProcessTable,
  type ProcessTableOptions,
  type StartRequest,
  type StartResult,
} from '@tether/local-process';

/** `process/start` as the session sees it: the engine's request plus how its output travels. */
export interface SessionStartRequest extends StartRequest {
  /** Output notifications carry raw bytes as an attachment (`binaryOutput`). */
  binaryOutput?: boolean;
}

import { DetachedProcesses, type DetachedWatcher } from './detached.js';
import type { Logger } from './logger.js';
import { ExecutorMetrics, secondsSince } from './metrics.js';
import { LOCAL_PRINCIPAL, type Principal, type ProcessAction, principalKey, samePrincipal } from './principal.js';

/** A process this session started and has not seen exit yet (for the process metrics). */
interface RunningProcess {
  startedAt: number;
  /** `process/terminate` was asked for it: its exit counts as `terminated`. */
  terminating: boolean;
}

/** What a session needs from the connection it is attached to. */
export interface SessionAttachment {
  /** Delivers one process event; returns false when the connection is above its high-water mark. */
  deliver(event: ProcessEvent): boolean;
  /** The session was taken away from this attachment (server shutdown or TTL races). */
  detached(): void;
  /** Sends a notification of the session's (`network/policyDecision`); dropped once the connection is gone. */
  notify(method: string, params: unknown): void;
  /**
   * Asks the client a question of the session's (`network/policyRequest`, to a client that opted in) and waits at
   * most `timeoutMs` for its answer; `none` once the connection is gone.
   */
  ask(method: string, params: unknown, timeoutMs: number): Promise<OutboundAnswer>;
}

type SessionState =
  | { kind: 'attached'; attachment: SessionAttachment }
  | { kind: 'detached'; since: number; timer: NodeJS.Timeout }
  | { kind: 'closed' };

/**
 * A session owns the processes a client started. It is attached to at most one connection; events go
 * to that connection only. While detached, output keeps being retained for `process/read` and
 * notifications are dropped. It acts for one principal (principal.ts), who owns the detached processes it
 * starts and is the only one who may resume it.
 */
export class Session implements DetachedWatcher {
  readonly id: string;
  /** Who this session acts for: fixed at its creation. */
  readonly principal: Principal;
  readonly table: ProcessTable;
  /** The executor's detached processes (shared by every session; owned by the registry). */
  readonly detached: DetachedProcesses;
  private stateValue: SessionState;
  private outputPaused = false;
  /**
   * The connection was congested when a watched detached process's event came: its events are dropped
   * until the connection drains (a detached child is never paused for one watcher); the client reads the gap.
   */
  private detachedLagging = false;
  private readonly metrics: ExecutorMetrics;
  private readonly running = new Map<string, RunningProcess>();
  /** Processes whose output goes out as raw bytes (until their close event). */
  private readonly binaryOutput = new Set<string>();

  constructor(
    id: string,
    attachment: SessionAttachment,
    tableOptions: Omit<ProcessTableOptions, 'onEvent'>,
    metrics: ExecutorMetrics,
    detached: DetachedProcesses,
    principal: Principal = LOCAL_PRINCIPAL,
  ) {
    this.id = id;
    this.principal = principal;
    this.detached = detached;
    this.stateValue = { kind: 'attached', attachment };
    this.metrics = metrics;
    this.table = new ProcessTable({ ...tableOptions, onEvent: (event) => this.onEvent(event) });
  }

  /** `process/start` through the table, counted in the process metrics. */
  async startProcess(request: SessionStartRequest): Promise<StartResult> {
    // Ids are unique across the executor's detached processes and this session's (see detached.ts). Which
    // kind it is, is said only to a session that may see the process.
    if (this.detached.has(request.processId)) {
      const visible = this.detached.allows(request.processId, this.principal, 'list');
      throw new ProcessError(
        'already_exists',
        `process ${request.processId} already exists${visible ? ' (a detached process)' : ''}`,
      );
    }
    // A known id fails with `already_exists` in the table; it must not replace the running record.
    if (this.running.has(request.processId)) return this.table.start(request);
    if (request.binaryOutput) this.binaryOutput.add(request.processId);
    else this.binaryOutput.delete(request.processId);
    const record: RunningProcess = { startedAt: performance.now(), terminating: false };
    this.running.set(request.processId, record);
    this.metrics.processStarting();
    try {
      return await this.table.start(request);
    } catch (err) {
      if (this.running.get(request.processId) === record) {
        this.running.delete(request.processId);
        this.binaryOutput.delete(request.processId);
        this.metrics.processStartFailed();
      }
      throw err;
    }
  }

  /** `process/start {detached: true}`: the process belongs to the executor (detached.ts), owned by this principal. */
  startDetached(request: StartRequest): Promise<StartResult> {
    return this.detached.start(request, this.principal);
  }

  /**
   * `process/attach`: this session gets a detached process's notifications from now on. With a share's token
   * (capability `processShare`) a principal that does not own the process comes in as the share says.
   */
  attachDetached(
    processId: string,
    shareToken?: string,
  ): ProcessSummary & { detached: true; access: 'view' | 'control' } {
    if (this.table.has(processId)) {
      throw new ProcessError('invalid_argument', `process ${processId} belongs to this session; it is not detached`);
    }
    if (shareToken !== undefined) this.detached.redeem(processId, shareToken, this.principal);
    const entry = this.detached.watch(processId, this, this.principal);
    return { ...entry, access: this.detached.allows(processId, this.principal, 'control') ? 'control' : 'view' };
  }

  /** `process/share` of a detached process this session's principal owns (or may reach as local or admin). */
  shareDetached(processId: string, access: ShareAccess, ttlMs: number) {
    if (this.table.has(processId)) {
      throw new ProcessError(
        'invalid_argument',
        `process ${processId} belongs to this session and ends with it: only a detached process can be shared (start it with detached: true)`,
      );
    }
    return this.detached.share(processId, this.principal, access, ttlMs);
  }

  /** `process/unshare`: revokes one share of the process, or all of them. */
  unshareDetached(processId: string, shareId?: string): number {
    return this.detached.unshare(processId, this.principal, shareId);
  }

  /** Who follows a process this session follows changed: its client is told. */
  participantsChanged(processId: string, participants: Participant[]): void {
    if (this.stateValue.kind === 'attached') {
      this.stateValue.attachment.notify(Notification.processParticipants, { processId, participants });
    }
  }

  /** A share this session followed `processId` by ended: its client is told (the process is gone to it). */
  accessRevoked(processId: string): void {
    if (this.stateValue.kind === 'attached') {
      this.stateValue.attachment.notify(Notification.processAccessRevoked, { processId });
    }
  }

  /**
   * The table that holds `processId` for `action`: this session's, or the executor's detached processes where
   * this session's principal may do `action` to it (`read` is `attach`; stdin, resize, signals are `control`).
   * Any other id goes to this session's table, which answers as Codex does for an unknown id: a detached process
   * of another principal looks exactly like no process.
   */
  tableFor(processId: string, action: ProcessAction): ProcessTable {
    return !this.table.has(processId) && this.detached.allows(processId, this.principal, action)
      ? this.detached.table
      : this.table;
  }

  /**
   * `process/write` to this session's process or a detached one. A detached process takes writes from every
   * session, so its write ids are this session's own (a resumed session keeps its id, so a retried write is
   * still recognised); another session's `writeId` of the same text is another write.
   */
  writeProcess(processId: string, chunk: Buffer, writeId: string, release?: () => void) {
    const table = this.tableFor(processId, 'control');
    const id = table === this.table ? writeId : `${this.id}\u0000${writeId}`;
    return table.write(processId, chunk, id, release, principalKey(this.principal));
  }

  /** `process/list`: this session's processes, then the executor's detached ones this principal may list. */
  listProcesses(): Array<ProcessSummary & { detached: boolean }> {
    return [
      ...this.table.list().map((entry) => ({ ...entry, detached: false })),
      ...this.detached.list(this.principal),
    ];
  }

  deliverDetached(event: ProcessEvent): void {
    if (this.stateValue.kind !== 'attached' || this.detachedLagging) return;
    if (!this.stateValue.attachment.deliver(event)) this.detachedLagging = true;
  }

  /** `process/terminate`: its exit is then counted as `terminated`. */
  terminateProcess(processId: string): { running: boolean } {
    if (this.tableFor(processId, 'control') !== this.table) return this.detached.terminate(processId);
    const record = this.running.get(processId);
    if (record) record.terminating = true;
    return this.table.terminate(processId);
  }

  private processExited(processId: string, exitCode: number): void {
    const record = this.running.get(processId);
    if (!record) return;
    this.running.delete(processId);
    // A session that is closed (stdio end, expiry, shutdown) killed its processes itself.
    const result =
      record.terminating || this.stateValue.kind === 'closed' ? 'terminated' : exitCode === 0 ? 'success' : 'error';
    this.metrics.processFinished(result, secondsSince(record.startedAt));
  }

  get state(): SessionState['kind'] {
    return this.stateValue.kind;
  }

  isAttachedTo(attachment: SessionAttachment): boolean {
    return this.stateValue.kind === 'attached' && this.stateValue.attachment === attachment;
  }

  /** The attached connection is writable again: let the children's output flow. */
  drained(attachment: SessionAttachment): void {
    if (this.isAttachedTo(attachment)) this.detachedLagging = false;
    if (this.outputPaused && this.isAttachedTo(attachment)) {
      this.outputPaused = false;
      this.table.resumeOutput();
    }
  }

  /** Whether `processId`'s output notifications carry raw bytes. */
  sendsBinaryOutput(processId: string): boolean {
    return this.binaryOutput.has(processId);
  }

  private onEvent(event: ProcessEvent): void {
    if (event.kind === 'exited') this.processExited(event.processId, event.exitCode);
    if (event.kind === 'closed') this.binaryOutput.delete(event.processId);
    if (this.stateValue.kind !== 'attached') return;
    const writable = this.stateValue.attachment.deliver(event);
    // Backpressure: a client that reads notifications slower than children write makes the children
    // wait (their pipes fill) instead of growing a buffer here.
    if (!writable && !this.outputPaused) {
      this.outputPaused = true;
      this.table.pauseOutput();
    }
  }

  /** @internal transitions, owned by SessionRegistry */
  setState(state: SessionState): void {
    if (this.stateValue.kind === 'detached') clearTimeout(this.stateValue.timer);
    this.stateValue = state;
    this.detachedLagging = false;
    if (state.kind !== 'attached' && this.outputPaused) {
      // Detached: nothing is delivered, so nothing should hold the children back.
      this.outputPaused = false;
      this.table.resumeOutput();
    }
  }

  get detachedSince(): number | null {
    return this.stateValue.kind === 'detached' ? this.stateValue.since : null;
  }

  get attachment(): SessionAttachment | null {
    return this.stateValue.kind === 'attached' ? this.stateValue.attachment : null;
  }
}

export interface SessionRegistryOptions {
  detachedTtlMs: number;
  maxSessions: number;
  tableOptions: Omit<ProcessTableOptions, 'onEvent'>;
  logger: Logger;
  now?: () => number;
  metrics?: ExecutorMetrics;
  /** Detached processes at once (`--max-detached-processes`, default 64). */
  maxDetachedProcesses?: number;
  /** How long a closed detached process stays readable (default 10 minutes). */
  detachedExitedRetentionMs?: number;
}

/**
 * The only owner of session attachment state (spec §2): create, resume with `resumeSessionId`,
 * detach on disconnect with a TTL, expiry kills the session's processes, shutdown kills everything.
 */
export class SessionRegistry {
  private readonly sessions = new Map<string, Session>();
  private readonly detachedTtlMs: number;
  private readonly maxSessions: number;
  /** Every session's process table is made with these (the detached table with some of them). */
  private readonly tableOptions: Omit<ProcessTableOptions, 'onEvent'>;
  private readonly logger: Logger;
  private readonly now: () => number;
  private readonly metrics: ExecutorMetrics;
  private closed = false;
  /** Processes that belong to the executor, not a session: they outlive sessions until shutdown. */
  readonly detached: DetachedProcesses;

  constructor(options: SessionRegistryOptions) {
    this.detachedTtlMs = options.detachedTtlMs;
    this.maxSessions = options.maxSessions;
    this.tableOptions = options.tableOptions;
    this.logger = options.logger;
    this.now = options.now ?? Date.now;
    this.metrics = options.metrics ?? new ExecutorMetrics();
    const {
      outputBudget: _budget,
      maxProcesses: _max,
      exitedRetentionMs: _retention,
      ...tableOptions
    } = options.tableOptions;
    this.detached = new DetachedProcesses({
      tableOptions,
      ...(options.maxDetachedProcesses === undefined ? {} : { maxProcesses: options.maxDetachedProcesses }),
      ...(options.detachedExitedRetentionMs === undefined
        ? {}
        : { exitedRetentionMs: options.detachedExitedRetentionMs }),
      usedBySession: (processId) => {
        for (const session of this.sessions.values()) if (session.table.has(processId)) return true;
        return false;
      },
      logger: options.logger,
      metrics: this.metrics,
    });
  }

  get size(): number {
    return this.sessions.size;
  }

  /** A new session acting for `principal` (default: the local one, stdio and `--listen`). */
  create(attachment: SessionAttachment, principal: Principal = LOCAL_PRINCIPAL): Session {
    if (this.closed) throw RpcError.invalidRequest('exec-server is shutting down');
    if (this.sessions.size >= this.maxSessions) {
      throw RpcError.invalidRequest(`too many sessions: limit is ${this.maxSessions}`);
    }
    const session = new Session(randomUUID(), attachment, this.tableOptions, this.metrics, this.detached, principal);
    this.sessions.set(session.id, session);
    return session;
  }

  /**
   * Attaches an existing session to a new connection (`initialize{resumeSessionId}`). Only the principal the
   * session acts for may resume it; to any other it is an unknown session id.
   */
  resume(id: string, attachment: SessionAttachment, principal: Principal = LOCAL_PRINCIPAL): Session {
    const session = this.sessions.get(id);
    if (!session || session.state === 'closed' || !samePrincipal(session.principal, principal)) {
      throw RpcError.invalidRequest(`unknown session id ${id}`);
    }
    if (session.state === 'attached') {
      if (session.isAttachedTo(attachment)) return session;
      throw new RpcError(ErrorCode.sessionAlreadyAttached, `session ${id} is already attached to another connection`);
    }
    const since = session.detachedSince ?? 0;
    if (this.now() - since >= this.detachedTtlMs) {
      this.expire(session);
      throw RpcError.invalidRequest(`unknown session id ${id}`);
    }
    session.setState({ kind: 'attached', attachment });
    this.logger.debug({ sessionId: id }, 'session resumed');
    return session;
  }

  /** The connection went away: keep the session for the TTL, then kill its processes. */
  detach(session: Session, attachment: SessionAttachment): void {
    if (!session.isAttachedTo(attachment)) return;
    const timer = setTimeout(() => this.expire(session), this.detachedTtlMs);
    timer.unref();
    session.setState({ kind: 'detached', since: this.now(), timer });
    this.logger.debug({ sessionId: session.id }, 'session detached');
  }

  /** Ends a session now (stdio connection end, expiry). */
  async end(session: Session): Promise<void> {
    if (session.state === 'closed') return;
    session.setState({ kind: 'closed' });
    this.sessions.delete(session.id);
    this.detached.forget(session);
    await session.table.shutdown();
  }

  private expire(session: Session): void {
    if (session.state !== 'detached') return;
    this.logger.info({ sessionId: session.id }, 'detached session expired; killing its processes');
    void this.end(session);
  }

  async shutdown(): Promise<void> {
    this.closed = true;
    const all = [...this.sessions.values()];
    for (const session of all) session.attachment?.detached();
    await Promise.all([...all.map((session) => this.end(session)), this.detached.shutdown()]);
  }
}
