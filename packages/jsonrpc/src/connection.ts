import {
  type InboundMessage,
  parseMessage,
  type RequestId,
  type RpcErrorObject,
  serializeError,
  serializeNotification,
  serializeRequest,
  serializeResponse,
} from './message.js';
import type { MessageTransport, TransportKind } from './transport.js';

export interface ConnectionHandlers {
  onMessage(message: InboundMessage): void;
  onClose?(reason: string): void;
  onDrain?(): void;
}

export type ConnectionStatus = 'idle' | 'open' | 'closed';

/**
 * A JSON-RPC connection over any MessageTransport. It parses and classifies inbound messages, serializes
 * outbound ones, exposes backpressure (`send*` return false above the high-water mark; `onDrain`), and owns
 * an AbortSignal that fires when the transport is gone, so in-flight work can stop.
 */
export class RpcConnection {
  private readonly transport: MessageTransport;
  private readonly abort = new AbortController();
  private handlers: ConnectionHandlers | null = null;
  private statusValue: ConnectionStatus = 'idle';
  readonly closed: Promise<string>;
  private resolveClosed!: (reason: string) => void;

  constructor(transport: MessageTransport) {
    this.transport = transport;
    this.closed = new Promise((resolve) => {
      this.resolveClosed = resolve;
    });
  }

  get kind(): TransportKind {
    return this.transport.kind;
  }

  /** Whether messages with binary attachments can be sent on this connection's transport. */
  get carriesAttachments(): boolean {
    return this.transport.carriesAttachments;
  }

  get label(): string {
    return this.transport.label;
  }

  get status(): ConnectionStatus {
    return this.statusValue;
  }

  /** Aborted (with the close reason) once the connection is closed. */
  get signal(): AbortSignal {
    return this.abort.signal;
  }

  get bufferedAmount(): number {
    return this.transport.bufferedAmount;
  }

  start(handlers: ConnectionHandlers): void {
    if (this.statusValue !== 'idle') throw new Error('RpcConnection already started');
    this.handlers = handlers;
    this.statusValue = 'open';
    this.transport.start({
      onMessage: (data, release) => {
        if (this.statusValue === 'open') this.handlers?.onMessage(parseMessage(data, release));
        else release?.();
      },
      onClose: (reason) => this.finish(reason),
      onDrain: () => this.handlers?.onDrain?.(),
    });
  }

  sendRequest(id: RequestId, method: string, params?: unknown): boolean {
    return this.sendRaw(serializeRequest(id, method, params));
  }

  sendNotification(method: string, params?: unknown): boolean {
    return this.sendRaw(serializeNotification(method, params));
  }

  sendResponse(id: RequestId, result: unknown): boolean {
    return this.sendRaw(serializeResponse(id, result));
  }

  sendError(id: RequestId, error: RpcErrorObject): boolean {
    return this.sendRaw(serializeError(id, error));
  }

  /**
   * Sends an already-serialized message (JSON text, or its UTF-8 bytes for hot paths that build the
   * frame directly). Returns false when the caller should wait for onDrain.
   */
  sendRaw(message: string | Buffer, release?: () => void): boolean {
    if (this.statusValue !== 'open') {
      release?.();
      return false;
    }
    return this.transport.send(message, release);
  }

  pause(): void {
    this.transport.pause();
  }

  resume(): void {
    this.transport.resume();
  }

  /** Closes the transport; idempotent. `code` is a WebSocket close code where the transport has one. */
  close(reason = 'closed', code?: number): void {
    if (this.statusValue === 'closed') return;
    this.transport.close(code, reason);
    this.finish(reason);
  }

  private finish(reason: string): void {
    if (this.statusValue === 'closed') return;
    this.statusValue = 'closed';
    this.abort.abort(new ConnectionClosedError(reason));
    this.handlers?.onClose?.(reason);
    this.resolveClosed(reason);
  }
}

export class ConnectionClosedError extends Error {
  static readonly NAME = 'ConnectionClosedError';
  override readonly name = ConnectionClosedError.NAME;
}

/** The text Codex uses for a message that could not be parsed (spec §1.4). */
export function malformedMessageText(connection: { kind: TransportKind; label: string }, reason: string): string {
  const what = connection.kind === 'websocket' ? 'websocket JSON-RPC message' : 'JSON-RPC message';
  return `failed to parse ${what} from ${connection.label}: ${reason}`;
}
