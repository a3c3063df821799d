import {
  clampFlowWindow,
  DEFAULT_FLOW_WINDOW_BYTES,
  decode,
  ErrorCode,
  type InitializeResult,
  Method,
  type MethodParams,
  type MethodResult,
  Notification,
  type Participant,
  ProcessParticipantsNotification,
  type RequestMethod,
  RpcError,
  ServerRequest,
} from '@tether/exec-protocol';
import {
  type CallOptions,
  ConnectionClosedError,
  encodeWithAttachment,
  RpcClient,
  RpcConnection,
  RpcTimeoutError,
} from '@tether/jsonrpc';
import type {
  ProcessBackend,
  ProcessEvent,
  ReadAnswer,
  SignalName,
  StartedProcess,
  StartOptions,
  WriteStatus,
} from './backend.js';
import type { ExecServerClientOptions } from './client-options.js';
import type { DialPhase } from './dial.js';
import { FINAL_ON_RESUME, lastCode, mayPass } from './dial-error.js';
import { decodeAnswer, processEventOf } from './edge.js';
import { TetherError } from './errors.js';
import { answerNetworkQuestion, type NetworkDecision, type NetworkPolicy, networkDecisionOf } from './network.js';
import { checkRegistryUrl } from './registry.js';
import { channelOrDirect, type RendezvousOptions, rendezvousDialer } from './rendezvous-dialer.js';
import { processStartParams } from './start-params.js';

/** Listeners keyed by process id, each set dropped with its last listener. */
class PerProcess<T> {
  readonly #listeners = new Map<string, Set<(value: T) => void>>();

  add(processId: string, listener: (value: T) => void): () => void {
    const listeners = this.#listeners.get(processId) ?? new Set();
    this.#listeners.set(processId, listeners);
    listeners.add(listener);
    return () => {
      listeners.delete(listener);
      if (listeners.size === 0) this.#listeners.delete(processId);
    };
  }

  /** Calls each listener of `processId` (a copy of the set: a listener may unsubscribe). */
  emit(processId: string, value: T): void {
    for (const listener of [...(this.#listeners.get(processId) ?? [])]) listener(value);
  }
}

/** Calls that may be sent again after a reconnect without changing their effect. */
const IDEMPOTENT: ReadonlySet<string> = new Set<RequestMethod>([
  Method.processRead,
  Method.processWrite,
  Method.processList,
  Method.environmentInfo,
  Method.fsReadFile,
  Method.fsGetMetadata,
  Method.fsReadDirectory,
  Method.fsCanonicalize,
]);

/** First pause between set-up attempts, and the longest. */
const CONNECT_RETRY_FIRST_MS = 100;
const CONNECT_RETRY_MAX_MS = 2_000;
const DEFAULT_CONNECT_TIMEOUT_MS = 20_000;
/** The least time an attempt gets before it is given up: one begun right at the deadline still has a chance. */
const MIN_ATTEMPT_MS = 1_000;

/** The executor's `initialize` answer, decoded. */
export type InitializeInfo = InitializeResult;

/** Options of one call: its deadline, and for hot paths the request's bytes written directly. */
export interface ClientCallOptions {
  timeoutMs?: number;
  encode?: CallOptions['encode'];
}

/**
 * A JSON-RPC client of one executor session, over any transport. When the transport drops it dials
 * again and resumes the same session (`resumeSessionId`); process handles then recover what they
 * missed by seq. Calls made while reconnecting wait for the new connection.
 *
 * This class is the platform-free core (the browser entry's `ExecServerClient`); exec-client-node.ts extends
 * it with what needs Node: WebSocket and stdio executors, and TCP forwarding.
 */
export class ExecServerClient implements ProcessBackend {
  private rpc: RpcClient | null = null;
  /** The connection under `rpc` (for `tcp/data` with a binary attachment). */
  protected connection: RpcConnection | null = null;
  private info: InitializeInfo | null = null;
  private capabilitiesOf: { info: InitializeInfo | null; names: ReadonlySet<string> } | undefined;
  private readonly listeners = new Set<(event: ProcessEvent) => void>();
  /** Listeners of each process's `network/policyDecision`s (only processes whose caller asked for them). */
  private readonly decisionListeners = new PerProcess<NetworkDecision>();
  /** Who is told that this session lost a process it followed by a share (`process/accessRevoked`). */
  private readonly revokedListeners = new PerProcess<void>();
  /** Who is told who follows a process this session follows (`process/participants`). */
  private readonly participantListeners = new PerProcess<Participant[]>();
  /** Who answers each process's `network/policyRequest`s (processes started with `network.ask`), until it ends. */
  private readonly networkAskers = new Map<string, NonNullable<NetworkPolicy['ask']>>();
  private readonly reconnectListeners = new Set<() => void>();
  private readonly closedListeners = new Set<(error: Error) => void>();
  private closed = false;
  private reconnecting: Promise<void> | null = null;
  private readonly abort = new AbortController();

  protected constructor(private readonly options: ExecServerClientOptions) {}

  /** A new, unconnected client of this class (a subclass's statics make their own). */
  protected static create(options: ExecServerClientOptions): ExecServerClient {
    return new ExecServerClient(options);
  }

  static async connect(options: ExecServerClientOptions): Promise<ExecServerClient> {
    // biome-ignore lint/complexity/noThisInStatic: the subclass's statics make its own clients (`create`)
    const client = this.create(options);
    const retry = options.connectRetry;
    const report = options.onProgress;
    const timeoutMs = (retry === false ? undefined : retry?.timeoutMs) ?? DEFAULT_CONNECT_TIMEOUT_MS;
    const deadline = Date.now() + timeoutMs;
    let delay = CONNECT_RETRY_FIRST_MS;
    for (let attempt = 1; ; attempt++) {
      try {
        await client.establish(null, attempt, retry === false ? undefined : deadline);
        return client;
      } catch (err) {
        const giveUp = (error: unknown) => {
          report?.({ kind: 'connect', phase: 'failed', attempt, error: (error as Error).message });
          return error;
        };
        if (retry === false || client.closed || !mayPass(err)) throw giveUp(err);
        const left = deadline - Date.now();
        if (left <= 0) {
          throw giveUp(
            new TetherError(
              lastCode(err),
              `could not connect within ${timeoutMs} ms (${attempt} attempts): ${(err as Error).message}`,
              { cause: err },
            ),
          );
        }
        const pause = Math.min(delay, left);
        report?.({ kind: 'connect', phase: 'backoff', attempt, delayMs: pause, error: (err as Error).message });
        await new Promise((resolve) => setTimeout(resolve, pause));
        delay = Math.min(delay * 2, CONNECT_RETRY_MAX_MS);
      }
    }
  }

  /**
   * An environment through the rendezvous: a bundle from the registry, the relay socket, the Noise IK
   * handshake with the executor key the registry vouches for. Every (re)connect uses a fresh bundle
   * and stream; the identity stays.
   */
  static connectRendezvous(
    options: RendezvousOptions & Omit<ExecServerClientOptions, 'dial'>,
  ): Promise<ExecServerClient> {
    // A bad or insecure registry URL is a usage error, before any key is generated or socket opened.
    checkRegistryUrl(options.registryUrl, options.allowInsecureRegistry);
    const direct = rendezvousDialer(options);
    const source = options.channelSource;
    // biome-ignore lint/complexity/noThisInStatic: the subclass's statics make its own clients (`create`)
    return this.connect({ ...options, dial: source ? channelOrDirect(source, direct) : direct.dial });
  }

  get sessionId(): string {
    return this.info?.sessionId ?? '';
  }

  /** The `initialize` result (session id, environment info, advertised capabilities). */
  get initializeResult(): InitializeInfo | null {
    return this.info;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** The flow window asked for each process: where the executor advertises `flowControl`, else none. */
  get flowWindowBytes(): number | null {
    return this.capability('flowControl') ? DEFAULT_FLOW_WINDOW_BYTES : null;
  }

  /** The extensions the executor advertised for this connection (`environmentInfo.capabilities`, flags set). */
  get capabilities(): ReadonlySet<string> {
    // Read once per initialize answer: every write and read asks (a new Set per 64 KiB write cost 1.5 % of an
    // upload's client CPU).
    if (this.capabilitiesOf?.info !== this.info) {
      const flags = (this.info?.environmentInfo as { capabilities?: unknown } | undefined)?.capabilities;
      const names =
        flags && typeof flags === 'object'
          ? Object.entries(flags)
              .filter(([, on]) => on === true)
              .map(([name]) => name)
          : [];
      this.capabilitiesOf = { info: this.info, names: new Set(names) };
    }
    return this.capabilitiesOf.names;
  }

  protected capability(name: string): boolean {
    return this.capabilities.has(name);
  }

  /**
   * One request of the protocol: `params` typed by exec-protocol's method table, the answer decoded against the
   * method's result schema before it is returned. Executor errors become TetherError with `rpcCode`; an answer
   * that is not the method's result is a `protocol` TetherError.
   */
  async call<M extends RequestMethod>(
    method: M,
    params: MethodParams<M>,
    options: ClientCallOptions = {},
  ): Promise<MethodResult<M>> {
    return decodeAnswer(method, await this.callRaw(method, params, options));
  }

  /**
   * A request by any name, its answer unchecked: for methods outside the protocol's table (an executor's own
   * extension, a test of what an executor does with a malformed request). Protocol methods go through `call`.
   */
  async callRaw(method: string, params?: unknown, options: ClientCallOptions = {}): Promise<unknown> {
    for (;;) {
      if (this.closed) throw new TetherError('closed', `the connection is closed; cannot call ${method}`);
      if (this.reconnecting) await this.reconnecting;
      const rpc = this.rpc!;
      try {
        return await rpc.call<unknown>(method, params, {
          timeoutMs: options.timeoutMs ?? this.options.callTimeoutMs ?? 60_000,
          ...(options.encode ? { encode: options.encode } : {}),
        });
      } catch (err) {
        if (RpcError.is(err)) {
          throw new TetherError('rpc', `${method}: ${err.message}`, { rpcCode: err.code, cause: err });
        }
        if (err instanceof RpcTimeoutError)
          throw new TetherError('closed', `${method}: ${err.message}`, { cause: err });
        if (err instanceof ConnectionClosedError) {
          // Retried once the session is back only when running it twice is harmless (writes carry ids).
          if (this.reconnecting && !this.closed && IDEMPOTENT.has(method)) continue;
          throw new TetherError('closed', `${method}: ${err.message}`, { cause: err });
        }
        throw err;
      }
    }
  }

  notify(method: string, params?: unknown): void {
    this.rpc?.notify(method, params);
  }

  close(reason = 'client closed'): void {
    if (this.closed) return;
    this.closed = true;
    this.abort.abort(new TetherError('closed', reason));
    this.rpc?.close(reason);
    const error = new TetherError('closed', `the connection to the executor is gone: ${reason}`);
    this.connectionGone(error);
    for (const listener of [...this.closedListeners]) listener(error);
    this.closedListeners.clear();
  }

  /**
   * The connection is gone (`error` says why): for what lives and dies with one connection, such as forwarded
   * TCP streams (exec-client-node.ts). The core has nothing of the kind.
   */
  protected connectionGone(_error: Error): void {}

  /** A `tcp/*` notification (TCP forwarding lives in exec-client-node.ts; the core drops them). */
  protected onTcpNotification(_method: string, _params: unknown): void {}

  // ProcessBackend ------------------------------------------------------------------------------

  async start(options: StartOptions): Promise<StartedProcess> {
    if (options.network && !this.capability('networkProxyLaunch')) {
      throw new TetherError(
        'invalid_state',
        'this executor cannot confine a process to named hosts (it does not offer networkProxyLaunch: a Tether executor needs bubblewrap for it)',
      );
    }
    const ask = options.network?.ask;
    if (ask && !this.capability('networkProxyReviewDomains')) {
      throw new TetherError(
        'invalid_state',
        'this executor cannot ask about hosts (network.ask): it does not offer networkProxyReviewDomains',
      );
    }
    // Before the start is sent: the command may reach a host before the start is answered.
    if (ask) this.networkAskers.set(options.processId, ask);
    const window = options.flowWindowBytes ?? null;
    const params = {
      ...processStartParams(options),
      ...(window === null ? {} : { flowControl: { windowBytes: window } }),
      // Output as raw bytes (an attachment) instead of base64 in JSON, where the executor offers it.
      ...(this.capability('binaryOutput') ? { binaryOutput: true } : {}),
    };
    let answer: MethodResult<typeof Method.processStart> | undefined;
    // A connection that drops with the start in flight leaves unknown whether it landed. The session is
    // resumed (the same process table): sending it again starts it, or finds it started. Cut again and
    // again (a flapping link), it is given up after a few tries, or as soon as the client gives up.
    for (let attempt = 0; answer === undefined; attempt++) {
      try {
        answer = await this.call(Method.processStart, params);
      } catch (err) {
        const landed =
          attempt > 0 &&
          err instanceof TetherError &&
          err.rpcCode === ErrorCode.invalidRequest &&
          /already exists/.test(err.message);
        // Started by an earlier request, with the window it asked for (the executor grants any in range).
        if (landed) return { flowWindowBytes: window === null ? null : clampFlowWindow(window) };
        const cut = err instanceof TetherError && err.code === 'closed' && err.cause instanceof ConnectionClosedError;
        if (!cut || this.closed || attempt >= START_RETRIES) {
          this.networkAskers.delete(options.processId);
          throw err;
        }
        // Let the transport's close reach this client first: the call then waits for the resumed session
        // (or fails, closed, when there is none).
        await new Promise((resolve) => setImmediate(resolve));
      }
    }
    // The executor is untrusted input: a grant is used only if it is a sane window no larger than asked.
    const granted = answer?.flowControl?.windowBytes;
    if (window === null || granted === undefined) return { flowWindowBytes: null };
    if (!Number.isSafeInteger(granted) || granted <= 0 || granted > window) {
      throw new TetherError('protocol', `process/start granted an invalid flow window: ${String(granted)}`);
    }
    return { flowWindowBytes: granted };
  }

  ack(processId: string, seq: number): void {
    // Lost with a dropped connection: the handle repeats its latest acknowledgement after the resume.
    if (!this.closed && !this.reconnecting) this.rpc?.notify(Notification.processAck, { processId, seq });
  }

  async read(
    processId: string,
    afterSeq: number,
    options: { maxBytes?: number; waitMs?: number } = {},
  ): Promise<ReadAnswer> {
    const answer = await this.call(
      Method.processRead,
      { processId, afterSeq, maxBytes: options.maxBytes ?? null, waitMs: options.waitMs ?? null },
      { timeoutMs: (this.options.callTimeoutMs ?? 60_000) + (options.waitMs ?? 0) },
    );
    return {
      chunks: answer.chunks.map((c) => ({ seq: c.seq, stream: c.stream, chunk: Buffer.from(c.chunk, 'base64') })),
      nextSeq: answer.nextSeq,
      exited: answer.exited,
      exitCode: answer.exitCode,
      closed: answer.closed,
      failure: answer.failure ?? null,
    };
  }

  async write(processId: string, chunk: Buffer, writeId: string): Promise<WriteStatus> {
    // Raw bytes as an attachment where the executor offers `binaryInput`, else Codex's base64 `chunk`.
    const answer = this.capability('binaryInput')
      ? await this.call(
          Method.processWrite,
          { processId, writeId },
          {
            encode: (id, allocate) =>
              encodeWithAttachment(
                JSON.stringify({ id, method: Method.processWrite, params: { processId, writeId } }),
                chunk,
                allocate,
              ),
          },
        )
      : await this.call(Method.processWrite, {
          processId,
          chunk: chunk.toString('base64'),
          writeId,
        });
    return answer.status;
  }

  async closeStdin(processId: string): Promise<WriteStatus> {
    const answer = await this.call(Method.processCloseStdin, { processId });
    return answer.status;
  }

  async signal(processId: string, signal: SignalName): Promise<void> {
    await this.call(Method.processSignal, { processId, signal });
  }

  async terminate(processId: string): Promise<void> {
    await this.call(Method.processTerminate, { processId });
  }

  async resize(processId: string, rows: number, cols: number): Promise<void> {
    await this.call(Method.processResize, { processId, rows, cols });
  }

  onNetworkDecision(processId: string, listener: (decision: NetworkDecision) => void): () => void {
    return this.decisionListeners.add(processId, listener);
  }

  /** Called when a share this session followed `processId` by is revoked or expires. Returns an unsubscribe. */
  onAccessRevoked(processId: string, listener: () => void): () => void {
    return this.revokedListeners.add(processId, listener);
  }

  /** Called with who follows `processId` (capability `processShare`) each time that changes. Returns an unsubscribe. */
  onParticipants(processId: string, listener: (participants: Participant[]) => void): () => void {
    return this.participantListeners.add(processId, listener);
  }

  subscribe(listener: (event: ProcessEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  onReconnect(listener: () => void): () => void {
    this.reconnectListeners.add(listener);
    return () => this.reconnectListeners.delete(listener);
  }

  onClosed(listener: (error: Error) => void): () => void {
    if (this.closed) {
      queueMicrotask(() => listener(new TetherError('closed', 'the connection to the executor is gone')));
      return () => undefined;
    }
    this.closedListeners.add(listener);
    return () => this.closedListeners.delete(listener);
  }

  // Connection lifecycle --------------------------------------------------------------------------

  /**
   * One attempt (`attempt`, for `onProgress`). With a `deadline` (epoch ms) it is given up at that moment (or
   * `MIN_ATTEMPT_MS` after it began, if later), wherever it is: its signal (the dial's, the initialize call's)
   * is aborted, and it fails with `connect_failed` saying which step it was in.
   */
  private async establish(resumeSessionId: string | null, attempt: number, deadline?: number): Promise<void> {
    if (deadline === undefined) return this.attemptOnce(resumeSessionId, attempt, this.abort.signal, () => {});
    let step = 'dial';
    const bound = this.boundBy(Math.max(deadline, Date.now() + MIN_ATTEMPT_MS));
    try {
      await this.attemptOnce(resumeSessionId, attempt, bound.signal, (phase) => {
        step = phase;
      });
    } catch (err) {
      if (bound.signal.aborted && !this.closed) {
        // What the step last failed with (a registry refusing connections, say) says more than the deadline.
        const last = err instanceof Error && err !== bound.signal.reason && err.name !== 'AbortError' ? err : null;
        throw new TetherError(
          lastCode(last),
          `the attempt was still in its ${step} at the deadline${last ? `: ${last.message}` : ''}`,
          { cause: err },
        );
      }
      throw err;
    } finally {
      bound.dispose();
    }
  }

  /**
   * A signal aborted when this client closes or at `deadline`, whichever comes first; `dispose` once the
   * attempt is over (it is never aborted after that).
   */
  private boundBy(deadline: number): { signal: AbortSignal; dispose(): void } {
    const controller = new AbortController();
    const onClose = () => controller.abort(this.abort.signal.reason);
    if (this.abort.signal.aborted) onClose();
    else this.abort.signal.addEventListener('abort', onClose, { once: true });
    const timer = setTimeout(
      () => controller.abort(new TetherError('connect_failed', 'the connect deadline passed')),
      Math.max(0, deadline - Date.now()),
    );
    return {
      signal: controller.signal,
      dispose: () => {
        clearTimeout(timer);
        this.abort.signal.removeEventListener('abort', onClose);
      },
    };
  }

  /** Dial (its steps told to `onStep` and `onProgress`), then `initialize` (resuming `resumeSessionId`). */
  private async attemptOnce(
    resumeSessionId: string | null,
    attempt: number,
    signal: AbortSignal,
    onStep: (step: DialPhase | 'initialize') => void,
  ): Promise<void> {
    const report = this.options.onProgress;
    const kind = resumeSessionId ? 'resume' : 'connect';
    const transport = await this.options.dial(signal, (phase) => {
      onStep(phase);
      report?.({ kind, phase, attempt });
    });
    onStep('initialize');
    report?.({ kind, phase: 'initialize', attempt });
    const connection = new RpcConnection(transport);
    const rpc: RpcClient = new RpcClient(connection, {
      onNotification: (method, params) => this.onNotification(method, params),
      onRequest: (method, params) => this.onRequest(method, params),
      callTimeoutMs: this.options.callTimeoutMs ?? 60_000,
      onClose: () => this.onTransportClosed(rpc),
    });
    let info: InitializeInfo;
    try {
      info = decodeAnswer(
        Method.initialize,
        await rpc.call<unknown>(
          Method.initialize,
          { clientName: this.options.clientName ?? 'tether-client', ...(resumeSessionId ? { resumeSessionId } : {}) },
          { signal },
        ),
      );
    } catch (err) {
      rpc.close('initialize failed');
      throw err;
    }
    if (this.closed) {
      rpc.close('client closed');
      throw new TetherError('closed', 'client closed while connecting');
    }
    if (resumeSessionId && info.sessionId !== resumeSessionId) {
      rpc.close('resumed a different session');
      throw new TetherError('protocol', `asked to resume session ${resumeSessionId}, got ${info.sessionId}`);
    }
    rpc.notify(Method.initialized, {});
    if (rpc.isClosed) throw new TetherError('closed', 'the connection closed right after initialize');
    this.rpc = rpc;
    this.connection = connection;
    this.info = info;
    report?.({ kind, phase: 'connected', attempt });
  }

  private onTransportClosed(rpc: RpcClient): void {
    if (this.closed || this.rpc !== rpc || this.reconnecting) return;
    // The executor ends a connection's forwarded TCP streams with it; a resumed session has none.
    this.connectionGone(new Error('the connection to the executor dropped'));
    if (this.options.reconnect === false) {
      this.options.onStatus?.('lost', 'transport closed');
      this.close('the transport closed');
      return;
    }
    this.options.onStatus?.('disconnected', 'transport closed; resuming the session');
    this.reconnecting = this.resume().finally(() => {
      this.reconnecting = null;
    });
  }

  private async resume(): Promise<void> {
    const reconnect = this.options.reconnect;
    const deadline = Date.now() + ((reconnect ? reconnect.timeoutMs : undefined) ?? 25_000);
    const sessionId = this.sessionId;
    const report = this.options.onProgress;
    let delay = 100;
    let lastError: unknown = null;
    let attempt = 0;
    while (!this.closed && Date.now() < deadline) {
      attempt++;
      try {
        await this.establish(sessionId, attempt, deadline);
        this.options.onStatus?.('reconnected', `session ${sessionId} resumed`);
        for (const listener of [...this.reconnectListeners]) listener();
        return;
      } catch (err) {
        lastError = err;
        // -32010: the executor has not noticed the old connection is gone yet; anything else may pass too.
        if (RpcError.is(err) && err.code !== ErrorCode.sessionAlreadyAttached) break;
        if (err instanceof TetherError && FINAL_ON_RESUME.has(err.code)) break;
      }
      report?.({ kind: 'resume', phase: 'backoff', attempt, delayMs: delay, error: (lastError as Error).message });
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 2_000);
    }
    const why = `could not resume session ${sessionId}: ${(lastError as Error)?.message ?? 'closed'}`;
    report?.({ kind: 'resume', phase: 'failed', attempt, error: why });
    this.options.onStatus?.('lost', why);
    this.close(why);
  }

  private onNotification(method: string, params: unknown): void {
    if (method.startsWith('tcp/')) {
      this.onTcpNotification(method, params);
      return;
    }
    if (method === Notification.networkPolicyDecision) {
      // From the executor (untrusted): one that does not decode, or names a process nobody listens for, goes.
      const decision = networkDecisionOf(params);
      if (decision !== null) this.decisionListeners.emit(decision.processId, decision);
      return;
    }
    if (method === Notification.processAccessRevoked) {
      // From the executor (untrusted): only a process somebody follows is looked up.
      const processId = (params as { processId?: unknown } | null)?.processId;
      if (typeof processId === 'string') this.revokedListeners.emit(processId, undefined);
      return;
    }
    if (method === Notification.processParticipants) {
      // From the executor (untrusted): a list that does not decode (shape, sizes) is dropped.
      let notice: ProcessParticipantsNotification;
      try {
        notice = decode(ProcessParticipantsNotification, params);
      } catch {
        return;
      }
      this.participantListeners.emit(notice.processId, notice.participants);
      return;
    }
    const event = processEventOf(method, params);
    if (event === null) return;
    if (event.kind === 'closed') this.networkAskers.delete(event.processId);
    for (const listener of this.listeners) listener(event);
  }

  /** A request from the executor: only `network/policyRequest` is one a client answers. */
  private onRequest(method: string, params: unknown): Promise<unknown> {
    if (method !== ServerRequest.networkPolicyRequest) throw RpcError.methodNotFound(method);
    return answerNetworkQuestion(params, (processId) => this.networkAskers.get(processId));
  }
}

/** How often a `process/start` cut by a dropped connection is sent again on the resumed session. */
const START_RETRIES = 5;
