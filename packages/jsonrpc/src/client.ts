import { BufferPool } from '@tether/bytes';
import { RpcError } from '@tether/exec-protocol';
import { ConnectionClosedError, type RpcConnection } from './connection.js';
import type { InboundMessage, RequestId } from './message.js';

export interface RpcClientOptions {
  onNotification?: (method: string, params: unknown) => void;
  /** Server→client requests; without a handler they are answered with -32601. */
  onRequest?: (method: string, params: unknown) => Promise<unknown> | unknown;
  /** Default timeout of one call; 0 = none. */
  callTimeoutMs?: number;
  /** Called once when the connection is gone (after pending calls were failed). */
  onClose?: (reason: string) => void;
}

export interface CallOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
  /**
   * Writes the whole request for this id as bytes instead of `JSON.stringify` (a hot path with a large
   * payload builds it directly; it must be the same JSON `{"id":…,"method":…,"params":…}`), into a buffer
   * of exactly `size` bytes from `allocate` (pooled: reused once the transport has sent it).
   */
  encode?: (id: RequestId, allocate: (size: number) => Buffer) => Buffer;
}

interface PendingCall {
  method: string;
  resolve(value: unknown): void;
  reject(error: Error): void;
  cleanup(): void;
}

export class RpcTimeoutError extends Error {
  static readonly NAME = 'RpcTimeoutError';
  override readonly name = RpcTimeoutError.NAME;
}

/**
 * A JSON-RPC client over an RpcConnection: integer ids from 1, a pending map, per-call AbortSignal and
 * timeout. A call registered after close, or pending when the connection drops, fails with
 * ConnectionClosedError; it can never hang.
 */
export class RpcClient {
  private readonly connection: RpcConnection;
  private readonly options: RpcClientOptions;
  private readonly pending = new Map<RequestId, PendingCall>();
  /** Buffers of requests built by `CallOptions.encode`. */
  private readonly buffers = new BufferPool();
  private nextId = 1;
  private closedReason: string | null = null;

  constructor(connection: RpcConnection, options: RpcClientOptions = {}) {
    this.connection = connection;
    this.options = options;
    connection.start({
      onMessage: (message) => this.onMessage(message),
      onClose: (reason) => {
        this.failAll(reason);
        this.options.onClose?.(reason);
      },
    });
  }

  get isClosed(): boolean {
    return this.closedReason !== null;
  }

  call<T = unknown>(method: string, params?: unknown, options: CallOptions = {}): Promise<T> {
    if (this.closedReason !== null) {
      return Promise.reject(new ConnectionClosedError(`connection closed: ${this.closedReason}`));
    }
    if (options.signal?.aborted) return Promise.reject(options.signal.reason);
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      const timeoutMs = options.timeoutMs ?? this.options.callTimeoutMs ?? 0;
      const timer =
        timeoutMs > 0
          ? setTimeout(() => {
              this.settle(id)?.reject(new RpcTimeoutError(`${method} timed out after ${timeoutMs} ms`));
            }, timeoutMs)
          : null;
      const onAbort = () => this.settle(id)?.reject(options.signal?.reason ?? new Error('aborted'));
      options.signal?.addEventListener('abort', onAbort, { once: true });
      this.pending.set(id, {
        method,
        resolve: resolve as (value: unknown) => void,
        reject,
        cleanup: () => {
          if (timer) clearTimeout(timer);
          options.signal?.removeEventListener('abort', onAbort);
        },
      });
      if (options.encode) {
        const encode = options.encode;
        const { built, release } = this.buffers.build((allocate) => encode(id, allocate));
        this.connection.sendRaw(built, release);
      } else {
        this.connection.sendRequest(id, method, params);
      }
    });
  }

  notify(method: string, params?: unknown): boolean {
    return this.connection.sendNotification(method, params);
  }

  close(reason = 'client closed'): void {
    this.connection.close(reason);
    this.failAll(reason);
  }

  private settle(id: RequestId): PendingCall | undefined {
    const call = this.pending.get(id);
    if (!call) return undefined;
    this.pending.delete(id);
    call.cleanup();
    return call;
  }

  private onMessage(message: InboundMessage): void {
    switch (message.kind) {
      case 'response':
        this.settle(message.id)?.resolve(message.result);
        return;
      case 'error':
        this.settle(message.id)?.reject(new RpcError(message.error.code, message.error.message, message.error.data));
        return;
      case 'notification':
        this.options.onNotification?.(message.method, message.params);
        return;
      case 'request':
        void this.answer(message.id, message.method, message.params);
        return;
      case 'malformed':
        return;
    }
  }

  private async answer(id: RequestId, method: string, params: unknown): Promise<void> {
    if (!this.options.onRequest) {
      this.connection.sendError(id, RpcError.methodNotFound(method));
      return;
    }
    try {
      this.connection.sendResponse(id, await this.options.onRequest(method, params));
    } catch (err) {
      const error = RpcError.is(err) ? err : RpcError.internal((err as Error).message);
      this.connection.sendError(id, { code: error.code, message: error.message });
    }
  }

  private failAll(reason: string): void {
    if (this.closedReason === null) this.closedReason = reason;
    for (const id of [...this.pending.keys()]) {
      this.settle(id)?.reject(new ConnectionClosedError(`connection closed: ${reason}`));
    }
  }
}
