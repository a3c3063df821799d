import { randomUUID } from 'node:crypto';
import { decodeResult, isRequestMethod } from '@tether/exec-protocol';
import { generateIdentity, parsePublicKey, publicKeyToJson } from '@tether/noise';
import { SecureStream, WebSocketFrameLink } from '@tether/secure-stream';
import WebSocket from 'ws';
import type { PeerHandle } from './peer.js';
import type { Bundle, TestRendezvous } from './rendezvous.js';

export type RpcId = string | number;

export interface RpcError {
  code: number;
  message: string;
  data?: unknown;
}

/** A decoded inbound message exactly as the peer sent it. */
export interface RpcMessage {
  id?: RpcId | null;
  method?: string;
  params?: unknown;
  result?: unknown;
  error?: RpcError;
  [key: string]: unknown;
}

export interface RpcResponse<T = unknown> {
  id: RpcId;
  result?: T;
  error?: RpcError;
  [key: string]: unknown;
}

export interface RpcNotification<P = Record<string, unknown>> {
  method: string;
  params: P;
  [key: string]: unknown;
}

export interface RequestOptions {
  /** Explicit request id (string or integer); default: an auto-incrementing integer from 1. */
  id?: RpcId;
  /** Fail if no response arrives in time. Default 15 s. */
  timeoutMs?: number;
}

export class RpcCallError extends Error {
  constructor(
    readonly method: string,
    readonly error: RpcError,
  ) {
    super(`${method} failed: ${error.code} ${error.message}`);
  }
}

export interface TestClient {
  readonly transport: 'ws' | 'stdio' | 'remote';
  /** Sends a request and resolves with the raw response (result or error); rejects on timeout/close. */
  request<T = unknown>(method: string, params?: unknown, options?: RequestOptions): Promise<RpcResponse<T>>;
  /** Like `request` but resolves with `result` and throws `RpcCallError` on an error response. */
  call<T = unknown>(method: string, params?: unknown, options?: RequestOptions): Promise<T>;
  /** Sends a notification (no id). */
  notify(method: string, params?: unknown): void;
  /** Sends raw bytes: ws → text frame for strings, binary frame for Buffers; stdio → the bytes plus `\n`. */
  sendRaw(data: string | Buffer): void;
  /**
   * The first notification (already received or arriving later) matching `predicate` that no earlier
   * `nextNotification` call returned.
   */
  nextNotification<P = Record<string, unknown>>(
    predicate?: (n: RpcNotification<P>) => boolean,
    timeoutMs?: number,
  ): Promise<RpcNotification<P>>;
  /** The first inbound message of any kind (already received or later) matching `predicate`. */
  waitForMessage(predicate: (m: RpcMessage) => boolean, timeoutMs?: number): Promise<RpcMessage>;
  /** Every notification received, in arrival order. */
  readonly notifications: RpcNotification[];
  /** Every inbound message (responses, notifications, anything else), in arrival order. */
  readonly messages: RpcMessage[];
  /** Inbound lines/frames that were not valid JSON objects. */
  readonly garbage: string[];
  /** Resolves when the transport closed (peer closed the connection, exited, or `close()`). */
  readonly closed: Promise<void>;
  readonly isClosed: boolean;
  /** Gracefully closes (ws close frame / stdin end) and waits up to 2 s, then tears down. */
  close(): Promise<void>;
  /** Abrupt disconnect (ws: TCP reset without a close frame; stdio: destroys the pipes). */
  terminate(): void;
}

interface Pending {
  resolve: (response: RpcResponse) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
  method: string;
}

interface Waiter {
  predicate: (m: RpcMessage) => boolean;
  resolve: (m: RpcMessage) => void;
  consume: boolean;
}

const DEFAULT_TIMEOUT_MS = 15_000;

function idKey(id: unknown): string {
  return JSON.stringify(id);
}

abstract class BaseClient implements TestClient {
  abstract readonly transport: 'ws' | 'stdio' | 'remote';
  readonly notifications: RpcNotification[] = [];
  readonly messages: RpcMessage[] = [];
  readonly garbage: string[] = [];
  readonly closed: Promise<void>;
  isClosed = false;
  private nextId = 1;
  private readonly pending = new Map<string, Pending>();
  private readonly waiters = new Set<Waiter>();
  private readonly consumed = new WeakSet<RpcMessage>();
  private markClosed!: () => void;

  constructor() {
    this.closed = new Promise((resolve) => {
      this.markClosed = resolve;
    });
  }

  protected abstract write(text: string): void;
  abstract sendRaw(data: string | Buffer): void;
  /** Starts closing the transport gracefully; `close()` waits for it, and terminates after 2 s. */
  protected abstract beginClose(): void;
  abstract terminate(): void;

  async close(): Promise<void> {
    if (this.isClosed) return;
    this.beginClose();
    const timer = setTimeout(() => this.terminate(), 2_000);
    await this.closed;
    clearTimeout(timer);
  }

  /**
   * A message as bytes: Tether's binary attachment framing (`0x01 | u32 BE length | JSON | bytes`, from
   * `binaryBlocks` and `binaryOutput`) puts the bytes on the message as `attachment`; anything else is text.
   */
  protected onBytes(data: Buffer): void {
    if (data.length >= 5 && data[0] === 0x01) {
      const headerBytes = data.readUInt32BE(1);
      if (headerBytes <= data.length - 5) {
        this.onText(data.toString('utf8', 5, 5 + headerBytes), Buffer.from(data.subarray(5 + headerBytes)));
        return;
      }
    }
    this.onText(data.toString('utf8'));
  }

  protected onText(text: string, attachment?: Buffer): void {
    let message: unknown;
    try {
      message = JSON.parse(text);
    } catch {
      this.garbage.push(text);
      return;
    }
    if (message === null || typeof message !== 'object' || Array.isArray(message)) {
      this.garbage.push(text);
      return;
    }
    const msg = message as RpcMessage;
    if (attachment !== undefined) msg.attachment = attachment;
    this.messages.push(msg);
    if (typeof msg.method === 'string' && msg.id === undefined) {
      this.notifications.push(msg as RpcNotification);
    } else if (msg.id !== undefined && typeof msg.method !== 'string') {
      const key = idKey(msg.id);
      const pending = this.pending.get(key);
      if (pending) {
        this.pending.delete(key);
        clearTimeout(pending.timer);
        this.consumed.add(msg);
        pending.resolve(msg as RpcResponse);
      }
    }
    for (const waiter of this.waiters) {
      if (waiter.consume && this.consumed.has(msg)) continue;
      if (waiter.predicate(msg)) {
        this.waiters.delete(waiter);
        if (waiter.consume) this.consumed.add(msg);
        waiter.resolve(msg);
      }
    }
  }

  protected onClosed(): void {
    if (this.isClosed) return;
    this.isClosed = true;
    for (const [key, pending] of this.pending) {
      clearTimeout(pending.timer);
      pending.reject(new Error(`connection closed before the response to ${pending.method} (id ${key})`));
    }
    this.pending.clear();
    this.markClosed();
  }

  request<T = unknown>(method: string, params?: unknown, options: RequestOptions = {}): Promise<RpcResponse<T>> {
    const id = options.id ?? this.nextId++;
    const key = idKey(id);
    if (this.isClosed) return Promise.reject(new Error(`connection closed; cannot send ${method}`));
    if (this.pending.has(key)) return Promise.reject(new Error(`request id ${key} is already pending`));
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const message: Record<string, unknown> = { id, method };
    if (params !== undefined) message.params = params;
    return new Promise<RpcResponse<T>>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(key);
        reject(new Error(`timed out after ${timeoutMs} ms waiting for the response to ${method} (id ${key})`));
      }, timeoutMs);
      this.pending.set(key, { resolve: resolve as (r: RpcResponse) => void, reject, timer, method });
      this.write(JSON.stringify(message));
    });
  }

  /**
   * A call by any name with any params (conformance tests send malformed ones on purpose). An answer to a
   * protocol method is checked against exec-protocol's result schema, so every conformance run also proves the
   * schemas the SDK decodes with against what both executors (ours and Codex's) really answer.
   */
  async call<T = unknown>(method: string, params?: unknown, options?: RequestOptions): Promise<T> {
    const response = await this.request<T>(method, params, options);
    if (response.error) throw new RpcCallError(method, response.error);
    if (isRequestMethod(method)) {
      try {
        decodeResult(method, response.result);
      } catch (err) {
        throw new Error(
          `the answer to ${method} does not match exec-protocol's result schema: ${(err as Error).message}: ${JSON.stringify(response.result).slice(0, 400)}`,
        );
      }
    }
    return response.result as T;
  }

  notify(method: string, params?: unknown): void {
    const message: Record<string, unknown> = { method };
    if (params !== undefined) message.params = params;
    this.write(JSON.stringify(message));
  }

  private waitFor(
    predicate: (m: RpcMessage) => boolean,
    consume: boolean,
    timeoutMs: number,
    what: string,
  ): Promise<RpcMessage> {
    for (const msg of this.messages) {
      if (consume && this.consumed.has(msg)) continue;
      if (predicate(msg)) {
        if (consume) this.consumed.add(msg);
        return Promise.resolve(msg);
      }
    }
    return new Promise((resolve, reject) => {
      const waiter: Waiter = {
        predicate,
        consume,
        resolve: (m) => {
          clearTimeout(timer);
          resolve(m);
        },
      };
      const timer = setTimeout(() => {
        this.waiters.delete(waiter);
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`));
      }, timeoutMs);
      this.waiters.add(waiter);
    });
  }

  nextNotification<P = Record<string, unknown>>(
    predicate: (n: RpcNotification<P>) => boolean = () => true,
    timeoutMs = DEFAULT_TIMEOUT_MS,
  ): Promise<RpcNotification<P>> {
    return this.waitFor(
      (m) => typeof m.method === 'string' && m.id === undefined && predicate(m as RpcNotification<P>),
      true,
      timeoutMs,
      'a matching notification',
    ) as Promise<RpcNotification<P>>;
  }

  waitForMessage(predicate: (m: RpcMessage) => boolean, timeoutMs = DEFAULT_TIMEOUT_MS): Promise<RpcMessage> {
    return this.waitFor(predicate, false, timeoutMs, 'a matching message');
  }
}

class WsClient extends BaseClient {
  readonly transport = 'ws' as const;
  constructor(private readonly socket: WebSocket) {
    super();
    socket.on('message', (data: WebSocket.RawData) => {
      const buffer = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
      this.onBytes(buffer);
    });
    socket.on('close', () => this.onClosed());
    socket.on('error', () => this.onClosed());
  }

  protected write(text: string): void {
    if (this.socket.readyState !== WebSocket.OPEN) throw new Error('websocket is not open');
    this.socket.send(text);
  }

  sendRaw(data: string | Buffer): void {
    if (this.socket.readyState !== WebSocket.OPEN) throw new Error('websocket is not open');
    this.socket.send(data, { binary: Buffer.isBuffer(data) });
  }

  protected beginClose(): void {
    this.socket.close();
  }

  terminate(): void {
    this.socket.terminate();
  }
}

/**
 * A raw JSON-RPC client over an end-to-end encrypted relay stream (what a harness uses in remote mode).
 * `sendRaw` sends the bytes as one message inside the encrypted channel; `terminate` drops the relay
 * socket without a Reset.
 */
class RelayClient extends BaseClient {
  readonly transport = 'remote' as const;
  constructor(
    private readonly stream: SecureStream,
    private readonly socket: WebSocket,
  ) {
    super();
    stream.start({
      onMessage: (data) => (typeof data === 'string' ? this.onText(data) : this.onBytes(Buffer.from(data))),
      onClose: () => this.onClosed(),
      onDrain: () => undefined,
    });
    socket.on('close', () => this.onClosed());
  }

  protected write(text: string): void {
    if (this.stream.status !== 'open') throw new Error('relay stream is not open');
    this.stream.send(text);
  }

  sendRaw(data: string | Buffer): void {
    // Bytes go as they are (a binary attachment message must not pass through a text decoding).
    if (this.stream.status !== 'open') throw new Error('relay stream is not open');
    this.stream.send(data);
  }

  protected beginClose(): void {
    this.stream.close();
    this.socket.close();
  }

  terminate(): void {
    this.socket.terminate();
  }
}

/** A real registry (`startStack`), reached over HTTP with a harness API key. */
export interface RegistryEndpoint {
  registryUrl: string;
  harnessKey: string;
}

/** `/connect` on a real registry (rendezvous.md §1.3). */
async function fetchBundle(
  registry: RegistryEndpoint,
  environmentId: string,
  harnessPublicKey: Record<string, unknown>,
): Promise<Bundle> {
  const response = await fetch(`${registry.registryUrl}/cloud/environment/${environmentId}/connect`, {
    method: 'POST',
    headers: { authorization: `Bearer ${registry.harnessKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ harness_public_key: harnessPublicKey }),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`/connect for ${environmentId} answered HTTP ${response.status}: ${text}`);
  return JSON.parse(text) as Bundle;
}

export interface ConnectRemoteOptions {
  /** Overrides the bundle's authorization (to test refusals). */
  authorization?: string;
  timeoutMs?: number;
}

/**
 * Opens a raw JSON-RPC client to an environment through a test rendezvous: a fresh harness identity,
 * a bundle from the rig's `/connect`, a relay socket, the Noise IK handshake.
 */
export async function connectRemote(
  rig: TestRendezvous | RegistryEndpoint,
  environmentId: string,
  options: ConnectRemoteOptions = {},
): Promise<TestClient> {
  const identity = generateIdentity();
  const harnessKey = publicKeyToJson(identity.publicKey) as unknown as Record<string, unknown>;
  const bundle =
    'connect' in rig ? rig.connect(environmentId, harnessKey) : await fetchBundle(rig, environmentId, harnessKey);
  const socket = new WebSocket(bundle.url, { perMessageDeflate: false, maxPayload: 256 * 1024 });
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  await opened(socket, `the relay for ${environmentId}`, timeoutMs);
  const streamId = randomUUID();
  try {
    const stream = await SecureStream.initiate({
      link: new WebSocketFrameLink(socket, streamId),
      streamId,
      environmentId: bundle.environment_id,
      registrationId: bundle.executor_registration_id,
      staticKeys: identity,
      remoteStatic: parsePublicKey(bundle.executor_public_key),
      authorization: options.authorization ?? bundle.harness_key_authorization,
      timeoutMs,
    });
    return new RelayClient(stream, socket);
  } catch (err) {
    socket.terminate();
    throw err;
  }
}

class StdioClient extends BaseClient {
  readonly transport = 'stdio' as const;
  constructor(private readonly peer: PeerHandle) {
    super();
    let buffer = '';
    peer.stdout.setEncoding('utf8');
    peer.stdout.on('data', (chunk: string) => {
      buffer += chunk;
      let newline = buffer.indexOf('\n');
      while (newline >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        if (line.trim() !== '') this.onText(line);
        newline = buffer.indexOf('\n');
      }
    });
    peer.stdout.on('end', () => this.onClosed());
    peer.stdout.on('close', () => this.onClosed());
    void peer.exited.then(() => this.onClosed());
  }

  protected write(text: string): void {
    this.peer.stdin.write(`${text}\n`);
  }

  sendRaw(data: string | Buffer): void {
    this.peer.stdin.write(Buffer.concat([Buffer.isBuffer(data) ? data : Buffer.from(data, 'utf8'), Buffer.from('\n')]));
  }

  protected beginClose(): void {
    this.peer.stdin.end();
  }

  terminate(): void {
    this.peer.stdin.destroy();
    this.peer.stdout.destroy();
    this.onClosed();
  }
}

export interface ConnectWsOptions {
  /** Extra HTTP headers for the upgrade request (e.g. `Origin`). */
  headers?: Record<string, string>;
  timeoutMs?: number;
}

/** Resolves once `socket` is open; rejects (and drops it) on a refused upgrade, an error or the timeout. */
function opened(socket: WebSocket, what: string, timeoutMs: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      socket.terminate();
      reject(new Error(`timed out connecting to ${what}`));
    }, timeoutMs);
    socket.once('open', () => {
      clearTimeout(timer);
      resolve();
    });
    socket.once('unexpected-response', (_req, res) => {
      clearTimeout(timer);
      socket.terminate();
      reject(new Error(`websocket upgrade to ${what} failed with HTTP ${res.statusCode}`));
    });
    socket.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
  });
}

/** Opens a raw JSON-RPC client over a WebSocket URL. */
export async function connectWs(url: string, options: ConnectWsOptions = {}): Promise<TestClient> {
  const socket = new WebSocket(url, { headers: options.headers ?? {}, perMessageDeflate: false });
  const client = new WsClient(socket);
  await opened(socket, url, options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
  return client;
}

/** Wraps a stdio peer's stdin/stdout as a raw JSON-RPC client (newline-delimited JSON). */
export function connectStdio(peer: PeerHandle): TestClient {
  if (peer.transport !== 'stdio') throw new Error('connectStdio needs a stdio peer');
  return new StdioClient(peer);
}

/** Connects to a peer over its transport: a new WebSocket for ws peers, the pipes for stdio peers. */
export function connect(peer: PeerHandle, options?: ConnectWsOptions): Promise<TestClient> {
  if (peer.transport === 'stdio') return Promise.resolve(connectStdio(peer));
  if (peer.transport === 'remote') throw new Error('remote peers are reached with connectRemote(rig, environmentId)');
  if (!peer.url) throw new Error('ws peer has no url');
  return connectWs(peer.url, options);
}

export interface InitializeResult {
  sessionId: string;
  [key: string]: unknown;
}

/** `initialize` (throws on error) followed by the `initialized` notification. */
export async function initialize(
  client: TestClient,
  params: Record<string, unknown> = { clientName: 'tether-test-kit' },
): Promise<InitializeResult> {
  const result = await client.call<InitializeResult>('initialize', params);
  client.notify('initialized', {});
  return result;
}
