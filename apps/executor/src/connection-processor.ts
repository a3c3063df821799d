import { BufferPool } from '@tether/bytes';
import {
  type Allocate,
  CONTROL_LANE_METHODS,
  decode,
  EnvironmentConfigReadParams,
  type EnvironmentInfo,
  ErrorCode,
  encodeOutputNotification,
  FsWatchMissingParams,
  InitializeParams,
  type InitializeResult,
  Method,
  methodFamily,
  Notification,
  ProcessAckParams,
  RpcError,
} from '@tether/exec-protocol';
import {
  encodeWithAttachment,
  type InboundMessage,
  MALFORMED_MESSAGE_ID,
  malformedMessageText,
  type OutboundAnswer,
  OutboundRequests,
  type RequestId,
  RequestLanes,
  type RpcConnection,
} from '@tether/jsonrpc';
import type { ChildLedger, ProcessEvent } from '@tether/local-process';
import type { ProxySettings } from '@tether/outbound';
import { Sandboxer } from '@tether/sandbox';
import { CredentialMasking } from './credential-masking.js';
import { readEnvironmentConfig } from './environment-config.js';
import { DEFAULT_MAX_FILE_HANDLES, FileHandleTable } from './fs/file-handles.js';
import { DEFAULT_MAX_READ_FILE_BYTES } from './fs/operations.js';
import { MissingWatch } from './fs/watch-missing.js';
import { whileAttached } from './handlers/attached.js';
import { capabilityHandlers } from './handlers/capabilities.js';
import { fsHandlers } from './handlers/fs.js';
import { httpHandlers } from './handlers/http.js';
import { processHandlers, toRpcError } from './handlers/process.js';
import { tcpHandlers } from './handlers/tcp.js';
import { EncodedResult, type HandlerTable, type RequestContext } from './handlers/types.js';
import { HttpRequests } from './http/http-requests.js';
import type { Logger } from './logger.js';
import { ExecutorMetrics, type RequestResult, secondsSince } from './metrics.js';
import { reasonLabel } from './network-proxy.js';
import { LOCAL_PRINCIPAL, type Principal, principalKey } from './principal.js';
import type { Recordings } from './recordings.js';
import type { Session, SessionAttachment, SessionRegistry } from './session-registry.js';
import { ShellSnapshots } from './shell-snapshot.js';
import { TcpForwards } from './tcp/forwards.js';
import { DEFAULT_FORWARD_ALLOW, type ForwardOptions, ForwardPolicy } from './tcp/policy.js';

/**
 * Requests to the client awaiting an answer at once (each a proxied connection held until its host is
 * decided); past it a host is decided as though the client had not answered.
 */
const MAX_OUTBOUND_REQUESTS = 64;

export const SESSION_TAKEN_OVER = 'session has been resumed by another connection';

/**
 * The buffer pools of one connection (ARCHITECTURE.md, "Who owns what"): `output` for
 * `process/output` notifications and large base64 responses, each handed back by the transport once
 * written; `blocks` for `fs/readBlock` reads and decoded `fs/writeBlock` chunks (≤ 1 MiB each). Reused
 * because a fresh megabyte per message is external memory that brings V8's full collections every few
 * dozen; per connection so that no two connections share a free slab.
 */
export interface ConnectionBuffers {
  readonly output: BufferPool;
  readonly blocks: BufferPool;
}

/** A connection's own pools: what one connection keeps in flight (its transport's 4 MiB high-water mark, a few blocks). */
export function connectionBuffers(): ConnectionBuffers {
  return {
    output: new BufferPool({ maxPooledBytes: 2 * 1024 * 1024 }),
    blocks: new BufferPool({ step: 64 * 1024, maxPooledBytes: 8 * 1024 * 1024 }),
  };
}

/**
 * Handshake state of one connection (spec §2): `new` → (initialize in flight) `initializing` →
 * `initialized-pending` (response sent, waiting for the `initialized` notification) → `ready`.
 */
type HandshakeState = 'new' | 'initializing' | 'initialized-pending' | 'ready';

export interface ConnectionProcessorOptions {
  registry: SessionRegistry;
  concurrency: number;
  /** What `initialize` answers; its `tcpForward` capability must match `forward` (ExecServer sets both). */
  environmentInfo: EnvironmentInfo;
  logger: Logger;
  /** End the session with the connection instead of detaching it (stdio: one client, no resume). */
  endSessionOnClose?: boolean;
  /** Largest file `fs/readFile` returns (default 512 MiB, as Codex). */
  maxReadFileBytes?: number;
  /** Open `fs/open` handles per connection (default 128, as Codex). */
  maxFileHandles?: number;
  /** Connection and request metrics (default: recorded nowhere). */
  metrics?: ExecutorMetrics;
  /** The connection's pools, from its creator, which closes them. Default: its own, closed with it. */
  buffers?: ConnectionBuffers;
  /** TCP forwarding (`tcpForward`); default: loopback targets only. */
  forward?: ForwardOptions;
  /** The proxies `http/request` goes through (the CLI reads them from the environment); default none. */
  proxy?: ProxySettings;
  /** The executor's sandbox (its owner closes it); default: none, every restricting profile refused. */
  sandbox?: Sandboxer;
  /** Where the sandboxed fs helpers are noted as the executor's own children (its orphan adopter); default none. */
  adopter?: ChildLedger | null;
  /** The executor's login-shell snapshots (its owner closes them); default: a set of this connection's own. */
  shellSnapshots?: ShellSnapshots;
  /** The executor's session recordings (`--record-dir`; its owner closes them); default none. */
  recordings?: Recordings | null;
  /** The executor's credential masking (its owner closes it); default: one of this connection's own. */
  credentialMasking?: CredentialMasking;
  /**
   * Who this connection acts for (principal.ts): the key the registry named for a relay stream; default the
   * local principal (stdio, `--listen`).
   */
  principal?: Principal;
}

/** A client's audit metadata as logged: as given when small, else cut (it is the client's, of any size). */
function boundedAudit(metadata: unknown): unknown {
  if (metadata === undefined || metadata === null) return null;
  const text = JSON.stringify(metadata);
  return text.length <= 2048 ? metadata : `${text.slice(0, 2048)}…`;
}

/** What a view-only key's harness may call: reading about the environment and following shared processes. */
const VIEW_ONLY_METHODS: ReadonlySet<string> = new Set([
  Method.environmentInfo,
  Method.environmentStatus,
  Method.processList,
  Method.processAttach,
  Method.processRead,
]);

/**
 * What a control link's session (`harness share` without `--read-only`, in the browser) may call: a view's methods
 * and the control of processes shared with it (each checked against its share); never a start, a file or a share.
 */
const LINK_METHODS: ReadonlySet<string> = new Set([
  ...VIEW_ONLY_METHODS,
  Method.processWrite,
  Method.processResize,
  Method.processSignal,
  Method.processTerminate,
  Method.processCloseStdin,
]);

/**
 * Runs one RpcConnection: gates the handshake, dispatches requests through the lanes, forwards the
 * session's process events as notifications, and detaches the session when the transport goes away.
 * It never knows which transport it has.
 */
export class ConnectionProcessor implements SessionAttachment {
  private readonly connection: RpcConnection;
  /** The sessions this connection creates or resumes, for `principal`; ended or detached with it. */
  private readonly registry: SessionRegistry;
  private readonly principal: Principal;
  /** Snapshots of this connection alone, where the server gave it none to share (closed with it). */
  private readonly ownSnapshots: ShellSnapshots | null;
  /** Credential masking of this connection alone, where the server gave it none to share (closed with it). */
  private readonly ownMasking: CredentialMasking | null;
  private readonly endSessionOnClose: boolean;
  private readonly lanes: RequestLanes;
  private readonly handlers: HandlerTable;
  private readonly logger: Logger;
  private readonly metrics: ExecutorMetrics;
  /** Marks this connection closed in `exec_server_connections_active`; set once started. */
  private connectionClosed: (() => void) | null = null;
  private handshake: HandshakeState = 'new';
  private sessionValue: Session | null = null;
  /** Connection-scoped resources: open files and streamed HTTP bodies end with the connection. */
  private readonly files: FileHandleTable;
  private readonly http: HttpRequests;
  /** Forwarded TCP connections (`tcp/*`), destroyed with the connection. */
  private readonly tcp: TcpForwards;
  /** This connection's `fs/watchMissing` watch (one at a time; closed with the connection). */
  private readonly missingWatch: MissingWatch;
  /** Requests this server sends the client (`network/policyRequest`, to a client that opted in); closed with it. */
  private readonly outbound: OutboundRequests;
  private drainWaiters: (() => void)[] = [];
  readonly buffers: ConnectionBuffers;
  private readonly ownsBuffers: boolean;
  /** Aborted when the connection closes or the session is taken by another connection. */
  private readonly lifetime = new AbortController();
  readonly done: Promise<void>;
  private resolveDone!: () => void;

  /** The request methods this connection answers (beside `initialize`, which opens it). */
  get methods(): readonly string[] {
    return Object.keys(this.handlers);
  }

  constructor(connection: RpcConnection, options: ConnectionProcessorOptions) {
    this.connection = connection;
    this.registry = options.registry;
    this.principal = options.principal ?? LOCAL_PRINCIPAL;
    // A set of this connection's own only where the server shares none (a bare processor, in tests).
    this.ownSnapshots = options.shellSnapshots ? null : new ShellSnapshots();
    this.ownMasking = options.credentialMasking ? null : new CredentialMasking();
    this.endSessionOnClose = options.endSessionOnClose ?? false;
    this.logger = options.logger;
    this.metrics = options.metrics ?? new ExecutorMetrics();
    this.ownsBuffers = options.buffers === undefined;
    this.buffers = options.buffers ?? connectionBuffers();
    this.done = new Promise((resolve) => {
      this.resolveDone = resolve;
    });
    this.lanes = new RequestLanes({
      concurrency: options.concurrency,
      onBusy: () => connection.pause(),
      onIdle: () => connection.resume(),
    });
    this.files = new FileHandleTable(options.maxFileHandles ?? DEFAULT_MAX_FILE_HANDLES);
    this.http = new HttpRequests({
      ...(options.proxy ? { proxy: options.proxy } : {}),
      sendDelta: (params) => connection.sendNotification(Notification.httpRequestBodyDelta, params),
      writable: () =>
        connection.status === 'open'
          ? new Promise<void>((resolve) => this.drainWaiters.push(resolve))
          : Promise.resolve(),
    });
    const forward = options.forward ?? { policy: ForwardPolicy.parse(DEFAULT_FORWARD_ALLOW) };
    this.tcp = new TcpForwards({
      ...forward,
      carriesAttachments: connection.carriesAttachments,
      sendRaw: (encode) => this.sendPooled(encode),
      sendNotification: (method, params) => connection.sendNotification(method, params),
    });
    this.outbound = new OutboundRequests({
      maxPending: MAX_OUTBOUND_REQUESTS,
      send: (id, method, params) => connection.sendRequest(id, method, params),
    });
    this.missingWatch = new MissingWatch((watchId) =>
      connection.sendNotification(Notification.fsMissingChanged, { watchId }),
    );
    this.handlers = {
      ...processHandlers,
      ...tcpHandlers(this.tcp),
      ...whileAttached({
        [Method.fsWatchMissing]: (raw) => this.missingWatch.watch(decode(FsWatchMissingParams, raw)),
      }),
      ...fsHandlers,
      ...httpHandlers,
      ...capabilityHandlers,
      [Method.environmentInfo]: () => this.environmentInfo,
      [Method.environmentStatus]: () => ({ status: 'ready' }),
      [Method.environmentConfigRead]: (raw) => readEnvironmentConfig(decode(EnvironmentConfigReadParams, raw)),
    };
    // `binaryBlocks`, `binaryOutput` and `binaryInput` only where messages with binary attachments can travel
    // (not stdio).
    this.environmentInfo = connection.carriesAttachments
      ? {
          ...options.environmentInfo,
          capabilities: {
            ...options.environmentInfo.capabilities,
            binaryBlocks: true,
            binaryOutput: true,
            binaryInput: true,
          },
        }
      : options.environmentInfo;
    this.context = {
      carriesAttachments: connection.carriesAttachments,
      session: () => {
        const session = this.sessionValue;
        if (!session?.isAttachedTo(this)) throw RpcError.invalidRequest(SESSION_TAKEN_OVER);
        return session;
      },
      signal: this.lifetime.signal,
      files: this.files,
      http: this.http,
      blocks: this.buffers.blocks,
      maxReadFileBytes: options.maxReadFileBytes ?? DEFAULT_MAX_READ_FILE_BYTES,
      sandbox: options.sandbox ?? Sandboxer.none('this connection was served without a sandbox'),
      adopter: options.adopter ?? null,
      notify: (method, params) => {
        if (connection.status === 'open') void connection.sendNotification(method, params);
      },
      shellSnapshots: (options.shellSnapshots ?? this.ownSnapshots!).scope(principalKey(this.principal)),
      recordings: options.recordings ?? null,
      credentialMasking: options.credentialMasking ?? this.ownMasking!,
      networkAudit: {
        started: () => this.metrics.networkProxyStarted(),
        decided: (processId, launch, decision) => {
          this.metrics.networkDecision(decision.protocol, decision.decision, reasonLabel(decision.reason));
          // The audit trail Codex's proxy keeps: each decision with the start's audit metadata (the client's,
          // bounded) and who asked; hosts are fine in a log, never in a metric label.
          this.logger.info(
            {
              processId,
              executionId: launch.executionId ?? null,
              environmentId: launch.environmentId ?? null,
              auditMetadata: boundedAudit(launch.auditMetadata),
              principal: principalKey(this.principal),
              protocol: decision.protocol,
              host: decision.host,
              port: decision.port,
              ...(decision.method === undefined ? {} : { method: decision.method }),
              decision: decision.decision,
              reason: decision.reason.slice(0, 200),
              source: decision.source,
            },
            'network policy decision',
          );
        },
      },
      principal: principalKey(this.principal),
    };
  }

  start(): void {
    this.connectionClosed = this.metrics.connectionOpened(this.connection.kind);
    this.connection.start({
      onMessage: (message) => this.onMessage(message),
      onClose: (reason) => this.onClose(reason),
      onDrain: () => {
        this.sessionValue?.drained(this);
        this.tcp.drained();
        this.releaseDrainWaiters();
      },
    });
  }

  /** Closes the connection; the session is detached (or ended, for stdio) as on any disconnect. */
  close(reason = 'server closing'): void {
    this.connection.close(reason, 1001);
  }

  // SessionAttachment ----------------------------------------------------------------------------

  deliver(event: ProcessEvent): boolean {
    switch (event.kind) {
      case 'output':
        // A session resumed on a connection without attachments falls back to base64.
        if (this.connection.carriesAttachments && this.sessionValue?.sendsBinaryOutput(event.processId)) {
          const head = {
            method: Notification.processOutput,
            params: { processId: event.processId, seq: event.seq, stream: event.stream },
          };
          return this.sendPooled((allocate) => encodeWithAttachment(JSON.stringify(head), event.chunk, allocate));
        }
        return this.sendPooled((allocate) =>
          encodeOutputNotification(event.processId, event.seq, event.stream, event.chunk, allocate),
        );
      case 'exited':
        return this.connection.sendNotification(Notification.processExited, {
          processId: event.processId,
          seq: event.seq,
          exitCode: event.exitCode,
          sandboxDenied: event.sandboxDenied,
        });
      case 'closed':
        return this.connection.sendNotification(Notification.processClosed, {
          processId: event.processId,
          seq: event.seq,
        });
    }
  }

  /** Sends a message built into a pooled buffer, which the transport hands back once written (see BufferPool). */
  private sendPooled(encode: (allocate: Allocate) => Buffer): boolean {
    const { built, release } = this.buffers.output.build(encode);
    return this.connection.sendRaw(built, release);
  }

  detached(): void {
    this.lifetime.abort(RpcError.invalidRequest(SESSION_TAKEN_OVER));
  }

  notify(method: string, params: unknown): void {
    if (this.connection.status === 'open') void this.connection.sendNotification(method, params);
  }

  ask(method: string, params: unknown, timeoutMs: number): Promise<OutboundAnswer> {
    return this.outbound.request(method, params, timeoutMs);
  }

  // Inbound ---------------------------------------------------------------------------------------

  private onMessage(message: InboundMessage): void {
    switch (message.kind) {
      case 'request':
        this.onRequest(message.id, message.method, message.params);
        return;
      case 'notification':
        // Forwarded bytes and their credit bypass the lanes too, for the same reason.
        if (message.method.startsWith('tcp/') && this.handshake === 'ready') {
          const problem = this.tcp.onNotification(message.method, message.params);
          if (problem !== null) this.protocolError(problem);
          return;
        }
        // Acknowledgements bypass the lanes: one queued behind a long poll would hold the child back.
        if (message.method === Notification.processAck && this.handshake === 'ready') {
          this.onAck(message.params);
          return;
        }
        this.lanes.run(this.handshake === 'ready' ? 'ordinary' : 'inline', () => this.onNotification(message.method));
        return;
      case 'malformed':
        this.connection.sendError(MALFORMED_MESSAGE_ID, {
          code: ErrorCode.invalidRequest,
          message: malformedMessageText(this.connection, message.reason),
        });
        return;
      case 'response':
      case 'error':
        // An answer to a request this server sent; any other is a protocol error.
        if (this.outbound.settle(message.id, message)) return;
        this.protocolError(`unexpected ${message.kind} for id ${JSON.stringify(message.id)}`);
        return;
    }
  }

  private onNotification(method: string): void {
    if (method !== Method.initialized) {
      this.protocolError(`unknown notification \`${method}\``);
      return;
    }
    // A second `initialized` is ignored, as Codex does (tests/conformance/CODEX-FINDINGS.md, 21).
    if (this.handshake === 'ready') return;
    if (this.handshake !== 'initialized-pending' || !this.sessionValue?.isAttachedTo(this)) {
      this.protocolError('received `initialized` before a successful `initialize`');
      return;
    }
    this.handshake = 'ready';
  }

  /** `process/ack`: flow credit back for one process of this connection's session. */
  private onAck(raw: unknown): void {
    let params: ProcessAckParams;
    try {
      params = decode(ProcessAckParams, raw);
    } catch (err) {
      this.protocolError(`invalid \`process/ack\`: ${(err as Error).message}`);
      return;
    }
    const session = this.sessionValue;
    if (session?.isAttachedTo(this)) session.table.ack(params.processId, params.seq);
  }

  private onRequest(id: RequestId, method: string, params: unknown): void {
    const receivedAt = performance.now();
    if (method === Method.initialize) {
      // Reserved synchronously, so a pipelined second initialize is refused even in concurrent mode.
      if (this.handshake !== 'new') {
        this.connection.sendError(id, RpcError.invalidRequest('initialize may only be sent once per connection'));
        this.metrics.requestFinished(method, 'error', 0, secondsSince(receivedAt));
        return;
      }
      this.handshake = 'initializing';
      this.lanes.run('inline', () => this.respond(id, method, receivedAt, () => this.initialize(params)));
      return;
    }
    const lane = this.handshake !== 'ready' ? 'inline' : CONTROL_LANE_METHODS.has(method) ? 'control' : 'ordinary';
    this.lanes.run(lane, () => this.respond(id, method, receivedAt, () => this.dispatch(method, params)));
  }

  private dispatch(method: string, params: unknown): Promise<unknown> | unknown {
    const handler = this.handlers[method];
    if (!handler) throw RpcError.methodNotFound(method);
    if (this.handshake !== 'ready') {
      const family = methodFamily(method) ?? 'exec';
      throw RpcError.invalidRequest(
        this.handshake === 'initialized-pending'
          ? `client must send initialized before using ${family} methods`
          : `client must call initialize before using ${family} methods`,
      );
    }
    // A view-only key (`registry keys create --access view`) watches what is shared with it, and nothing else.
    if (this.principal.kind === 'key' && this.principal.viewOnly && !VIEW_ONLY_METHODS.has(method)) {
      throw RpcError.invalidRequest(
        this.principal.link === undefined
          ? `this API key is view-only: ${method} is refused (it may list processes and follow those shared with it)`
          : `this is a read-only share link: ${method} is refused (it may follow the process shared with it)`,
      );
    }
    if (this.principal.kind === 'key' && this.principal.link !== undefined && !LINK_METHODS.has(method)) {
      throw RpcError.invalidRequest(
        `this is a share link's session: ${method} is refused (it may follow and control only the process shared with it)`,
      );
    }
    return handler(params, this.context);
  }

  private readonly context: RequestContext;
  /** The server's environment info with this connection's capabilities. */
  private readonly environmentInfo: EnvironmentInfo;

  private releaseDrainWaiters(): void {
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const resolve of waiters) resolve();
  }

  private async respond(
    id: RequestId,
    method: string,
    receivedAt: number,
    run: () => Promise<unknown> | unknown,
  ): Promise<void> {
    if (this.connection.status !== 'open') {
      this.metrics.requestFinished(method, 'disconnected', null, secondsSince(receivedAt));
      return;
    }
    const startedAt = performance.now();
    this.metrics.requestAdmitted(method, (startedAt - receivedAt) / 1000);
    const finished = (result: RequestResult) =>
      this.metrics.requestFinished(method, result, secondsSince(startedAt), secondsSince(receivedAt));
    let result: unknown;
    try {
      result = await run();
    } catch (err) {
      if (this.connection.status !== 'open') {
        finished('disconnected'); // disconnect aborts the request: no response
        return;
      }
      const error =
        this.lifetime.signal.aborted && this.sessionValue && !this.sessionValue.isAttachedTo(this)
          ? RpcError.invalidRequest(SESSION_TAKEN_OVER)
          : toRpcError(err);
      if (error.code === ErrorCode.internal) this.logger.warn({ err: error.message }, 'request failed');
      this.connection.sendError(id, { code: error.code, message: error.message, data: error.data });
      finished('error');
      return;
    }
    if (this.connection.status !== 'open') {
      finished('disconnected');
      return;
    }
    if (result instanceof EncodedResult) this.sendPooled((allocate) => result.encode(id, allocate));
    else this.connection.sendResponse(id, result);
    finished('success');
  }

  private initialize(raw: unknown): InitializeResult {
    try {
      const params = decode(InitializeParams, raw);
      const session = params.resumeSessionId
        ? this.registry.resume(params.resumeSessionId, this, this.principal)
        : this.registry.create(this, this.principal);
      this.sessionValue = session;
      this.handshake = 'initialized-pending';
      this.logger.debug({ sessionId: session.id, resumed: Boolean(params.resumeSessionId) }, 'initialized');
      return { sessionId: session.id, environmentInfo: this.environmentInfo };
    } catch (err) {
      // A failed attach lets the client retry initialize on the same connection.
      this.handshake = 'new';
      throw err;
    }
  }

  private protocolError(reason: string): void {
    this.logger.warn({ reason, transport: this.connection.kind }, 'closing connection after a protocol error');
    this.connection.close(`protocol error: ${reason}`, 1002);
  }

  private onClose(reason: string): void {
    this.connectionClosed?.();
    this.lifetime.abort(RpcError.invalidRequest(`connection closed: ${reason}`));
    this.http.closeAll();
    this.tcp.closeAll();
    this.ownSnapshots?.close();
    void this.ownMasking?.close();
    this.missingWatch.close();
    this.outbound.close(`connection closed: ${reason}`);
    this.releaseDrainWaiters();
    // Messages still queued in the transport and blocks still being read or written come back to nothing.
    if (this.ownsBuffers) {
      this.buffers.output.close();
      this.buffers.blocks.close();
    }
    const files = this.files.closeAll();
    const session = this.sessionValue;
    this.sessionValue = null;
    const finish = async () => {
      if (session) {
        if (this.endSessionOnClose) await this.registry.end(session);
        else this.registry.detach(session, this);
      }
      await files; // `done` means every descriptor of this connection is closed
      this.resolveDone();
    };
    void finish();
  }
}
