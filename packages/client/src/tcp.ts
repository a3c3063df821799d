import { randomUUID } from 'node:crypto';
import { createConnection } from 'node:net';
import { Duplex } from 'node:stream';
import { HandedChunks } from '@tether/bytes';
import {
  clampTcpWindow,
  DEFAULT_TCP_WINDOW_BYTES,
  decodeBase64,
  MAX_TCP_CHUNK_BYTES,
  Method,
  type MethodParams,
  type MethodResult,
  MIN_TCP_WINDOW_BYTES,
  Notification,
  ReceiveCredit,
  type RequestMethod,
  RpcError,
  SendCredit,
  TCP_RECEIVED_REPORT_BYTES,
} from '@tether/exec-protocol';
import { attachmentOf, takeAttachmentRelease } from '@tether/jsonrpc';
import { MAX_RECORD_PLAINTEXT_BYTES, MESSAGE_LENGTH_PREFIX_BYTES } from '@tether/relay-frames/limits';
import { TetherError } from './errors.js';

/** The capability an executor advertises when it forwards TCP (exec-protocol's tcp.ts). */
export const TCP_FORWARD_CAPABILITY = 'tcpForward';
/** One `tcp/data` carries at most this much: with its header it fits one secure-stream record. */
const PIECE_BYTES = MAX_RECORD_PLAINTEXT_BYTES - MESSAGE_LENGTH_PREFIX_BYTES - 256;
/** Forwarded connections one client keeps at once (the executor has its own, lower, bound). */
const MAX_CLIENT_STREAMS = 4096;
/** Local buffering of received bytes before the consumer is pushed back on (the window comes on top). */
const READABLE_HIGH_WATER_BYTES = 256 * 1024;

/** What the forwarder needs from its client. */
export interface TcpLink {
  call<M extends RequestMethod>(method: M, params: MethodParams<M>): Promise<MethodResult<M>>;
  notify(method: string, params: unknown): void;
  /** Sends `tcp/data` with the bytes as an attachment where the executor takes them, else base64. */
  sendData(streamId: string, chunk: Buffer): void;
  capabilities(): ReadonlySet<string>;
}

export interface ConnectTcpOptions {
  /** Flow window asked for each direction (default 2 MiB; the executor clamps it to 64 KiB–8 MiB). */
  windowBytes?: number;
}

/** `tcp/connect` failed; `kind` is the executor's reason (`notAllowed`, `refused`, `unresolvable`, …). */
export class TcpConnectError extends TetherError {
  override readonly name: string = 'TcpConnectError';
  constructor(
    readonly kind: string,
    message: string,
    options: { cause?: unknown; rpcCode?: number },
  ) {
    super('rpc', message, options);
  }
}

/**
 * The forwarded TCP connections of one executor client (capability `tcpForward`). Each is a Duplex whose
 * bytes travel as `tcp/data` notifications inside the session, flow-controlled both ways: the executor sends
 * only while this side has acknowledged all but a window of what it sent, and this side acknowledges only
 * what its consumer took, so a slow reader here pauses the remote socket; writes here wait for the executor's
 * acknowledgements, so a slow target there pauses the writer here. `end()` half-closes.
 */
export class TcpForwarder {
  readonly #link: TcpLink;
  readonly #streams = new Map<string, TcpConnection>();
  /** `tcp/data` bytes received on the current connection, and how many of them were reported (`tcp/received`). */
  #receivedTotal = 0;
  #receivedReported = 0;
  #receivedDue = false;

  constructor(link: TcpLink) {
    this.#link = link;
  }

  get size(): number {
    return this.#streams.size;
  }

  async connect(host: string, port: number, options: ConnectTcpOptions = {}): Promise<TcpConnection> {
    if (!this.#link.capabilities().has(TCP_FORWARD_CAPABILITY)) {
      throw new TetherError(
        'invalid_state',
        'this executor does not offer TCP forwarding (capability tcpForward): codex exec-server has no such extension, and a Tether executor started with --no-forward refuses it',
      );
    }
    if (typeof host !== 'string' || host.length === 0 || host.length > 255) {
      throw new TetherError('invalid_argument', 'host must be a non-empty name or address of at most 255 characters');
    }
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      throw new TetherError('invalid_argument', `port must be an integer from 1 to 65535, got ${port}`);
    }
    if (this.#streams.size >= MAX_CLIENT_STREAMS) {
      throw new TetherError('invalid_state', `at most ${MAX_CLIENT_STREAMS} forwarded connections at once`);
    }
    const windowBytes = clampTcpWindow(options.windowBytes ?? DEFAULT_TCP_WINDOW_BYTES);
    const streamId = randomUUID();
    // Registered before the request: bytes may come before the answer.
    const stream = new TcpConnection(
      streamId,
      host,
      port,
      windowBytes,
      this.#link,
      () => this.#streams.delete(streamId),
      () => this.receivedForAck(),
    );
    this.#streams.set(streamId, stream);
    let answer: MethodResult<typeof Method.tcpConnect>;
    try {
      answer = await this.#link.call(Method.tcpConnect, { streamId, host, port, windowBytes });
    } catch (err) {
      this.#streams.delete(streamId);
      stream.destroy();
      const cause = err instanceof TetherError ? err.cause : undefined;
      if (RpcError.is(cause)) {
        const kind = (cause.data as { kind?: unknown } | undefined)?.kind;
        throw new TcpConnectError(typeof kind === 'string' ? kind : 'failed', (err as Error).message, {
          cause,
          rpcCode: cause.code,
        });
      }
      throw err;
    }
    // The executor is untrusted input: a grant outside what was asked is a protocol error.
    const granted = answer.windowBytes;
    if (granted < MIN_TCP_WINDOW_BYTES || granted > windowBytes) {
      stream.destroy(new TetherError('protocol', 'tcp/connect: the executor granted an invalid window'));
      throw new TetherError('protocol', 'tcp/connect: the executor granted an invalid window');
    }
    if (stream.destroyed) {
      throw new TetherError('closed', `the forwarded connection to ${host}:${port} closed while opening`);
    }
    stream.opened(granted, answer.address, answer.port);
    return stream;
  }

  /** A `tcp/*` notification from the executor. */
  onNotification(method: string, params: unknown): void {
    const p = params as { streamId?: unknown } | null;
    const streamId = typeof p?.streamId === 'string' ? p.streamId : null;
    const stream = streamId === null ? undefined : this.#streams.get(streamId);
    let chunk: Buffer | null = null;
    if (method === Notification.tcpData) {
      chunk = dataOf(params);
      // Every stream's bytes count, even one that ended here: the executor counted them as on the way.
      if (chunk !== null) this.#countReceived(chunk.byteLength);
    }
    if (!stream) {
      this.#reportReceived();
      return; // ended here already, or never ours
    }
    const problem =
      method === Notification.tcpData
        ? chunk === null
          ? 'a tcp/data without valid data'
          : stream.onData(chunk, takeAttachmentRelease(params))
        : stream.onNotification(method, params);
    this.#reportReceived();
    if (problem !== null)
      stream.destroy(new TetherError('protocol', `forwarded connection: the executor sent ${problem}`));
  }

  /** The connection to the executor is gone (or was replaced): no stream can go on. */
  failAll(error: Error): void {
    const streams = [...this.#streams.values()];
    this.#streams.clear();
    // A new connection counts from zero.
    this.#receivedTotal = 0;
    this.#receivedReported = 0;
    for (const stream of streams) stream.lost(error);
  }

  #countReceived(bytes: number): void {
    this.#receivedTotal += bytes;
    this.#receivedDue = this.#receivedTotal - this.#receivedReported >= TCP_RECEIVED_REPORT_BYTES;
  }

  /**
   * After a `tcp/data` was handled: the report of what arrived, when one is due and the stream's ack (sent
   * meanwhile with `received` on it) did not carry it. One message per report interval, not two.
   */
  #reportReceived(): void {
    if (!this.#receivedDue) return;
    this.#receivedDue = false;
    this.#receivedReported = this.#receivedTotal;
    this.#link.notify(Notification.tcpReceived, { bytes: this.#receivedTotal });
  }

  /** What an ack may carry: the connection's received count, when it is worth reporting (then it is reported). */
  receivedForAck(): number | undefined {
    if (this.#receivedTotal - this.#receivedReported < TCP_RECEIVED_REPORT_BYTES / 4) return undefined;
    this.#receivedDue = false;
    this.#receivedReported = this.#receivedTotal;
    return this.#receivedTotal;
  }
}

type State = 'opening' | 'open' | 'closed';

/** One forwarded connection: a Duplex over `tcp/*` messages (see TcpForwarder). */
/**
 * A TCP connection as `Environment.connectTcp` gives it. `giveBack(chunk)` (a remote one's): the consumer
 * is done with a chunk, which may sit in a pooled buffer of the connection; other chunks are ignored.
 */
export type TcpDuplex = Duplex & { giveBack?(chunk: Uint8Array): void };

export class TcpConnection extends Duplex {
  readonly streamId: string;
  /** What was asked for. */
  readonly host: string;
  readonly port: number;
  /** Where the executor connected (the resolved address). */
  remoteAddress = '';
  remotePort = 0;
  readonly #link: TcpLink;
  readonly #forget: () => void;
  readonly #receivedForAck: () => number | undefined;
  #state: State = 'opening';
  #windowBytes: number;
  #send: SendCredit | null = null;
  #receive: ReceiveCredit;
  #sentTotal = 0;
  #ackedTotal = 0;
  #receivedTotal = 0;
  #consumedTotal = 0;
  #ackReported = 0;
  /** Bytes pushed to the consumer but not yet counted as consumed (the readable buffer was full). */
  #uncounted = 0;
  #wakeWriter: (() => void) | null = null;
  /** Chunks pushed in pooled buffers of the connection, until the consumer gives them back. */
  readonly #handed = new HandedChunks();

  constructor(
    streamId: string,
    host: string,
    port: number,
    windowBytes: number,
    link: TcpLink,
    forget: () => void,
    receivedForAck: () => number | undefined,
  ) {
    super({ allowHalfOpen: true, readableHighWaterMark: READABLE_HIGH_WATER_BYTES, decodeStrings: true });
    this.streamId = streamId;
    this.host = host;
    this.port = port;
    this.#link = link;
    this.#forget = forget;
    this.#receivedForAck = receivedForAck;
    this.#windowBytes = windowBytes;
    this.#receive = new ReceiveCredit(windowBytes);
  }

  /**
   * The consumer is done with `chunk` (written out, say): a chunk that came in a pooled buffer of the
   * connection goes back, and the buffer serves a later message. Optional; other chunks are ignored.
   */
  giveBack(chunk: Uint8Array): void {
    this.#handed.giveBack(chunk);
  }

  /** The executor answered `tcp/connect`. */
  opened(windowBytes: number, address: string, port: number): void {
    if (this.#state !== 'opening') return;
    this.#state = 'open';
    this.#windowBytes = windowBytes;
    this.#send = new SendCredit(windowBytes);
    // Bytes received before the answer were counted against the window asked for; keep their count.
    const pending = this.#receive.pending;
    this.#receive = new ReceiveCredit(windowBytes);
    if (pending > 0 && this.#receive.consumed(pending)) this.#sendAck();
    this.remoteAddress = address;
    this.remotePort = port;
  }

  // From the executor -----------------------------------------------------------------------------

  /**
   * `tcp/data`'s bytes, with the release of the pooled buffer they sit in (if they do), which goes with the
   * chunk to its consumer (`giveBack`). Returns a protocol problem, else null.
   */
  onData(chunk: Buffer, release?: () => void): string | null {
    if (chunk.byteLength > MAX_TCP_CHUNK_BYTES) return 'a tcp/data chunk above the limit';
    if (this.readableEnded || this.#state === 'closed') return null;
    this.#receivedTotal += chunk.byteLength;
    if (this.#receivedTotal - this.#ackReported > this.#windowBytes + MAX_TCP_CHUNK_BYTES) {
      return 'data beyond the window';
    }
    if (release) this.#handed.hand(chunk, release);
    const more = this.push(chunk);
    this.#uncounted += chunk.byteLength;
    if (more) this.#flushConsumed();
    return null;
  }

  /** Any other `tcp/*` notification. Returns a protocol problem, else null. */
  onNotification(method: string, params: unknown): string | null {
    switch (method) {
      case Notification.tcpAck: {
        const bytes = (params as { bytes?: unknown }).bytes;
        if (typeof bytes !== 'number' || !Number.isSafeInteger(bytes) || bytes < 0) return 'an invalid tcp/ack';
        if (bytes > this.#sentTotal) return 'an acknowledgement of bytes never sent';
        if (bytes <= this.#ackedTotal || this.#send === null) return null;
        this.#send.acked(bytes - this.#ackedTotal);
        this.#ackedTotal = bytes;
        this.#wake();
        return null;
      }
      case Notification.tcpShutdown:
        if (!this.readableEnded) this.push(null);
        return null;
      case Notification.tcpClosed: {
        const error = (params as { error?: unknown }).error;
        this.#closedByPeer(typeof error === 'string' ? error.slice(0, 1024) : null);
        return null;
      }
      default:
        return null; // a later extension: ignored
    }
  }

  /** The connection to the executor is gone. */
  lost(error: Error): void {
    if (this.#state === 'closed') return;
    this.#state = 'closed';
    this.#wake();
    this.destroy(new TetherError('closed', `forwarded connection to ${this.#target()} lost: ${error.message}`));
  }

  #closedByPeer(error: string | null): void {
    if (this.#state === 'closed') return;
    this.#state = 'closed';
    this.#forget();
    this.#wake();
    if (error !== null) {
      this.destroy(new TetherError('closed', `forwarded connection to ${this.#target()}: ${printable(error)}`));
      return;
    }
    // Both directions are done on the executor: what was received is still read out, then the stream ends.
    if (!this.readableEnded) this.push(null);
    if (this.writableFinished) return;
    if (this.readableEnded) this.destroy();
    else this.once('end', () => this.destroy());
  }

  #target(): string {
    return this.host.includes(':') ? `[${this.host}]:${this.port}` : `${this.host}:${this.port}`;
  }

  // Duplex ---------------------------------------------------------------------------------------

  override _read(): void {
    this.#flushConsumed();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.#sendAll(chunk).then(
      () => callback(),
      (err: Error) => callback(err),
    );
  }

  override _final(callback: (error?: Error | null) => void): void {
    if (this.#state === 'open') this.#link.notify(Notification.tcpShutdown, { streamId: this.streamId });
    callback();
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    if (this.#state !== 'closed') {
      this.#state = 'closed';
      this.#link.notify(Notification.tcpClose, { streamId: this.streamId });
    }
    this.#forget();
    this.#wake();
    callback(error);
  }

  async #sendAll(chunk: Buffer): Promise<void> {
    let offset = 0;
    while (offset < chunk.byteLength) {
      // After the executor closed the stream, what is still written goes nowhere (as after a peer's close).
      if (this.#state !== 'open' || this.#send === null) return;
      if (!this.#send.open) {
        await new Promise<void>((resolve) => {
          this.#wakeWriter = resolve;
        });
        continue;
      }
      const piece = chunk.subarray(offset, offset + PIECE_BYTES);
      offset += piece.byteLength;
      this.#link.sendData(this.streamId, piece);
      this.#sentTotal += piece.byteLength;
      this.#send.sent(piece.byteLength);
    }
  }

  #wake(): void {
    const wake = this.#wakeWriter;
    this.#wakeWriter = null;
    wake?.();
  }

  #flushConsumed(): void {
    if (this.#uncounted === 0) return;
    const bytes = this.#uncounted;
    this.#uncounted = 0;
    this.#countConsumed(bytes);
  }

  #countConsumed(bytes: number): void {
    this.#consumedTotal += bytes;
    if (this.#receive.consumed(bytes) && this.#state === 'open') this.#sendAck();
  }

  #sendAck(): void {
    this.#receive.ackSent();
    this.#ackReported = this.#consumedTotal;
    const received = this.#receivedForAck();
    this.#link.notify(Notification.tcpAck, {
      streamId: this.streamId,
      bytes: this.#consumedTotal,
      ...(received === undefined ? {} : { received }),
    });
  }
}

/** A `tcp/data`'s bytes: its attachment (the client's to keep), else strict base64; null when neither. */
function dataOf(params: unknown): Buffer | null {
  const attachment = attachmentOf(params);
  if (attachment) return attachment;
  const text = (params as { dataBase64?: unknown }).dataBase64;
  if (typeof text !== 'string') return null;
  try {
    return decodeBase64(text);
  } catch {
    return null;
  }
}

/** The executor's text, without control characters. */
function printable(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, '?');
}

/** A local environment's connection: a plain socket, once connected. */
export function connectLocalTcp(host: string, port: number): Promise<Duplex> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host, port, allowHalfOpen: true });
    const onError = (err: NodeJS.ErrnoException) => {
      const kind = err.code === 'ECONNREFUSED' ? 'refused' : err.code === 'ENOTFOUND' ? 'unresolvable' : 'failed';
      reject(new TcpConnectError(kind, `connecting to ${host}:${port} failed: ${err.message}`, { cause: err }));
    };
    socket.once('error', onError);
    socket.once('connect', () => {
      socket.off('error', onError);
      resolve(socket);
    });
  });
}
