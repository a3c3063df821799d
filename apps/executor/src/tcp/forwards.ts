import { lookup } from 'node:dns/promises';
import { createConnection, isIP, type Socket } from 'node:net';
import {
  type Allocate,
  clampTcpWindow,
  DecodeError,
  decode,
  decodeBase64,
  ErrorCode,
  Notification,
  RpcError,
  TcpAckParams,
  type TcpConnectErrorKind,
  type TcpConnectParams,
  type TcpConnectResult,
  TcpDataParams,
  TcpReceivedParams,
  TcpStreamParams,
} from '@tether/exec-protocol';
import { attachmentOf, encodeWithAttachment } from '@tether/jsonrpc';
import { MAX_RECORD_PLAINTEXT_BYTES, MESSAGE_LENGTH_PREFIX_BYTES } from '@tether/relay-frames';
import type { ForwardPolicy } from './policy.js';
import { type StreamLink, TcpStream } from './stream.js';

/** Default time a `tcp/connect` may take (resolving and connecting). */
export const DEFAULT_TCP_CONNECT_TIMEOUT_MS = 10_000;
/**
 * One socket read fits one secure-stream record with its `tcp/data` header (stream ids up to 128 bytes):
 * a 64 KiB read would take a full record and a 4 KiB one.
 */
const READ_BYTES = MAX_RECORD_PLAINTEXT_BYTES - MESSAGE_LENGTH_PREFIX_BYTES - 256;
/**
 * `tcp/data` bytes of one connection sent and not yet reported received (`tcp/received`), all its streams
 * together: what is on the way, in the relay's queues. Each stream's window bounds what its consumer has
 * not taken; this bounds the pipe, because the relay resets a harness that has more than 4 MiB queued
 * towards it (its `harnessMaxBufferedBytes`). The read that shuts it pauses every stream, so at most
 * 2 MiB + one read (60 KiB) is ever on the way, whatever the number of streams.
 * Twice the client's report interval, so that a report always finds room to reopen it.
 */
export const DEFAULT_TCP_CONNECTION_BUDGET_BYTES = 2 * 1024 * 1024;
/** Forwarded connections at once per executor connection, by default (see the budget above). */
export const DEFAULT_MAX_FORWARDED_STREAMS = 32;

export interface TcpForwardsOptions {
  /** Which targets may be reached; null: forwarding is off (`--no-forward`). */
  policy: ForwardPolicy | null;
  /** Forwarded connections at once on this connection (default 32). */
  maxStreams?: number;
  /** Whether `tcp/data` may carry its bytes as a binary attachment (else base64). */
  carriesAttachments: boolean;
  /** Sends a message built into a pooled buffer; false above the transport's high-water mark. */
  sendRaw(encode: (allocate: Allocate) => Buffer): boolean;
  sendNotification(method: string, params: unknown): boolean;
}

export function tcpConnectError(kind: TcpConnectErrorKind, message: string): RpcError {
  return new RpcError(kind === 'failed' ? ErrorCode.internal : ErrorCode.invalidRequest, message, { kind });
}

async function systemResolve(host: string): Promise<string[]> {
  const answers = await lookup(host, { all: true, verbatim: true });
  return answers.map((answer) => answer.address);
}

function formatTarget(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/**
 * The forwarded TCP connections of one executor connection (capability `tcpForward`, exec-protocol's
 * tcp.ts): `tcp/connect` opens one (after the policy allowed every address it goes to), notifications move
 * bytes, credit and half-closes. Bounded by `maxStreams`; everything is destroyed when the connection ends.
 */
export class TcpForwards implements StreamLink {
  readonly #options: TcpForwardsOptions;
  readonly #streams = new Map<string, TcpStream>();
  /** Ids of connects in flight (they count against the bound). */
  readonly #connecting = new Map<string, AbortController>();
  readonly #maxStreams: number;
  /** `tcp/data` bytes sent on this connection, and how many of them the client has reported received. */
  #sentTotal = 0;
  #receivedTotal = 0;
  #blocked = false;
  #closed = false;

  constructor(options: TcpForwardsOptions) {
    this.#options = options;
    this.#maxStreams = options.maxStreams ?? DEFAULT_MAX_FORWARDED_STREAMS;
  }

  get budgetOpen(): boolean {
    return this.#sentTotal - this.#receivedTotal < DEFAULT_TCP_CONNECTION_BUDGET_BYTES;
  }

  spent(bytes: number): void {
    const wasOpen = this.budgetOpen;
    this.#sentTotal += bytes;
    // The read that shut the budget pauses every stream at once: the overshoot is that one read, whatever
    // the number of streams.
    if (wasOpen && !this.budgetOpen && !this.#closed) {
      for (const stream of this.#streams.values()) stream.updateFlow();
    }
  }

  /** `tcp/received`: the client has received `bytes` of `tcp/data` in all. Returns a protocol problem. */
  #received(bytes: number): string | null {
    if (bytes > this.#sentTotal) return 'tcp/received counts bytes never sent';
    if (bytes <= this.#receivedTotal) return null;
    const wasOpen = this.budgetOpen;
    this.#receivedTotal = bytes;
    if (!wasOpen && this.budgetOpen && !this.#closed) {
      for (const stream of this.#streams.values()) stream.updateFlow();
    }
    return null;
  }

  get enabled(): boolean {
    return this.#options.policy !== null;
  }

  get blocked(): boolean {
    return this.#blocked;
  }

  /** Streams open and connects in flight. */
  get size(): number {
    return this.#streams.size + this.#connecting.size;
  }

  // tcp/connect -------------------------------------------------------------------------------------

  async connect(params: TcpConnectParams, signal: AbortSignal): Promise<TcpConnectResult> {
    const policy = this.#options.policy;
    if (policy === null) {
      throw tcpConnectError('disabled', 'port forwarding is disabled on this executor (--no-forward)');
    }
    const { streamId, host, port } = params;
    if (this.#closed) throw RpcError.invalidRequest('connection closed');
    if (this.#streams.has(streamId) || this.#connecting.has(streamId)) {
      throw tcpConnectError('duplicateStream', `tcp stream ${JSON.stringify(streamId)} already exists`);
    }
    if (this.size >= this.#maxStreams) {
      throw tcpConnectError(
        'tooManyStreams',
        `at most ${this.#maxStreams} forwarded connections at once per connection; close one first`,
      );
    }
    const abort = new AbortController();
    const onAbort = () => abort.abort(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    const timeoutMs = DEFAULT_TCP_CONNECT_TIMEOUT_MS;
    const timer = setTimeout(
      () =>
        abort.abort(
          tcpConnectError('timeout', `connecting to ${formatTarget(host, port)} timed out after ${timeoutMs} ms`),
        ),
      timeoutMs,
    );
    this.#connecting.set(streamId, abort);
    try {
      const target = formatTarget(host, port);
      const addresses = await this.#resolve(host, abort.signal);
      const allowed = addresses.filter((address) => policy.allows(address, port, host));
      if (allowed.length === 0) {
        throw tcpConnectError(
          'notAllowed',
          `${target} is not allowed by this executor's forward policy (default: loopback only; its operator can widen it with --forward-allow)`,
        );
      }
      let lastError: unknown = null;
      for (const address of allowed) {
        let socket: Socket;
        let reader: ReaderSlot;
        try {
          ({ socket, reader } = await this.#dial(address, port, abort.signal));
        } catch (err) {
          lastError = err;
          if (abort.signal.aborted) break;
          continue;
        }
        if (this.#closed) {
          socket.destroy();
          throw RpcError.invalidRequest('connection closed');
        }
        const windowBytes = clampTcpWindow(params.windowBytes);
        const stream = new TcpStream(streamId, socket, windowBytes, this);
        this.#streams.set(streamId, stream);
        reader.stream = stream;
        stream.updateFlow();
        return { windowBytes, address, port };
      }
      if (abort.signal.aborted) {
        const reason = abort.signal.reason;
        throw RpcError.is(reason) ? reason : RpcError.invalidRequest('connection closed');
      }
      throw connectFailure(lastError, target);
    } finally {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      this.#connecting.delete(streamId);
    }
  }

  async #resolve(host: string, signal: AbortSignal): Promise<string[]> {
    const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
    if (isIP(bare) !== 0) return [bare];
    const aborted = new Promise<never>((_, reject) => {
      if (signal.aborted) reject(signal.reason);
      signal.addEventListener('abort', () => reject(signal.reason), { once: true });
    });
    try {
      const addresses = await Promise.race([systemResolve(bare), aborted]);
      if (addresses.length === 0) throw new Error('no addresses');
      return addresses;
    } catch (err) {
      if (signal.aborted) throw RpcError.is(signal.reason) ? signal.reason : err;
      throw tcpConnectError('unresolvable', `cannot resolve ${JSON.stringify(bare)} on the executor`);
    }
  }

  #dial(address: string, port: number, signal: AbortSignal): Promise<{ socket: Socket; reader: ReaderSlot }> {
    return new Promise((resolve, reject) => {
      // The socket's own read buffer (the bytes are copied into the outgoing message at once).
      const buffer = Buffer.allocUnsafe(READ_BYTES);
      const reader: ReaderSlot = { stream: null };
      const socket: Socket = createConnection({
        host: address,
        port,
        allowHalfOpen: true,
        noDelay: true,
        onread: {
          buffer,
          // The stream is set before the socket is resumed (it starts paused, below).
          callback: (bytes: number, buf: Uint8Array) => reader.stream?.onRead(bytes, buf as Buffer) ?? false,
        },
      });
      const onAbort = () => socket.destroy();
      signal.addEventListener('abort', onAbort, { once: true });
      const fail = (err: Error) => {
        signal.removeEventListener('abort', onAbort);
        socket.destroy();
        reject(err);
      };
      socket.once('error', fail);
      socket.once('close', () => fail(new Error('closed while connecting')));
      socket.once('connect', () => {
        socket.pause();
        socket.off('error', fail);
        socket.removeAllListeners('close');
        signal.removeEventListener('abort', onAbort);
        resolve({ socket, reader });
      });
    });
  }

  // Notifications from the client ------------------------------------------------------------------

  /**
   * One `tcp/*` notification. Returns a protocol problem that ends the connection (a malformed message),
   * else null; a stream that misbehaves is reset on its own, and an unknown stream id (one that just
   * ended) is ignored.
   */
  onNotification(method: string, raw: unknown): string | null {
    try {
      switch (method) {
        case Notification.tcpData: {
          const params = decode(TcpDataParams, raw);
          const stream = this.#streams.get(params.streamId);
          if (!stream) return null;
          const attachment = attachmentOf(raw);
          let data: Buffer;
          if (attachment) {
            if (params.dataBase64 !== undefined) return '`dataBase64` and a binary attachment are exclusive';
            data = attachment;
          } else if (params.dataBase64 !== undefined) {
            data = decodeBase64(params.dataBase64);
          } else {
            return 'tcp/data without data';
          }
          const problem = stream.write(data);
          if (problem !== null) stream.reset(`protocol violation: ${problem}`, true);
          return null;
        }
        case Notification.tcpAck: {
          const params = decode(TcpAckParams, raw);
          if (params.received !== undefined) {
            const problem = this.#received(params.received);
            if (problem !== null) return problem;
          }
          const stream = this.#streams.get(params.streamId);
          const problem = stream?.ack(params.bytes) ?? null;
          if (problem !== null) stream?.reset(`protocol violation: ${problem}`, true);
          return null;
        }
        case Notification.tcpReceived:
          return this.#received(decode(TcpReceivedParams, raw).bytes);
        case Notification.tcpShutdown: {
          const params = decode(TcpStreamParams, raw);
          this.#streams.get(params.streamId)?.shutdown();
          return null;
        }
        case Notification.tcpClose: {
          const params = decode(TcpStreamParams, raw);
          this.#streams.get(params.streamId)?.reset(null, false);
          this.#connecting.get(params.streamId)?.abort(RpcError.invalidRequest('cancelled by tcp/close'));
          return null;
        }
        default:
          return `unknown notification \`${method}\``;
      }
    } catch (err) {
      if (err instanceof DecodeError) return `invalid \`${method}\`: ${err.message}`;
      return `invalid \`${method}\`: ${(err as Error).message}`;
    }
  }

  /** The connection's transport drained: streams paused for it read again. */
  drained(): void {
    if (!this.#blocked) return;
    this.#blocked = false;
    for (const stream of this.#streams.values()) stream.updateFlow();
  }

  /** The connection ended: every stream and connect in flight is destroyed. */
  closeAll(): void {
    this.#closed = true;
    for (const abort of this.#connecting.values()) abort.abort(RpcError.invalidRequest('connection closed'));
    for (const stream of [...this.#streams.values()]) stream.reset(null, false);
    this.#streams.clear();
  }

  // StreamLink ---------------------------------------------------------------------------------------

  sendData(streamId: string, header: string, chunk: Buffer): boolean {
    const ok = this.#options.carriesAttachments
      ? this.#options.sendRaw((allocate) => encodeWithAttachment(header, chunk, allocate))
      : this.#options.sendNotification(Notification.tcpData, { streamId, dataBase64: chunk.toString('base64') });
    if (!ok) this.#blocked = true;
    return ok;
  }

  sendNotification(method: string, params: unknown): boolean {
    return this.#options.sendNotification(method, params);
  }

  ended(streamId: string, error: string | null, notify: boolean): void {
    this.#streams.delete(streamId);
    if (notify && !this.#closed) this.#options.sendNotification(Notification.tcpClosed, { streamId, error });
  }
}

/** Which stream reads a socket (its `onread` callback is fixed when the socket is created, the stream later). */
interface ReaderSlot {
  stream: TcpStream | null;
}

function connectFailure(err: unknown, target: string): RpcError {
  if (RpcError.is(err)) return err;
  const code = (err as NodeJS.ErrnoException | null)?.code;
  switch (code) {
    case 'ECONNREFUSED':
      return tcpConnectError('refused', `connection to ${target} refused on the executor (nothing listens there?)`);
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
    case 'EADDRNOTAVAIL':
      return tcpConnectError('unreachable', `${target} is unreachable from the executor (${code})`);
    case 'ETIMEDOUT':
      return tcpConnectError('timeout', `connecting to ${target} timed out`);
    default:
      return tcpConnectError('failed', `connecting to ${target} failed${code ? ` (${code})` : ''}`);
  }
}
