import type { RequestId, RpcErrorObject } from './message.js';

/** How a request this side sent came out: the peer's result or error, or no answer (and why). */
export type OutboundAnswer =
  | { kind: 'result'; result: unknown }
  | { kind: 'error'; error: RpcErrorObject }
  | { kind: 'none'; reason: string };

export interface OutboundRequestsOptions {
  /** Sends one request; false when it could not be sent (the connection is gone). */
  send(id: number, method: string, params: unknown): boolean;
  /** Requests awaiting an answer at once; one more is answered `none` at once, never sent. */
  maxPending: number;
}

interface Pending {
  settle: (answer: OutboundAnswer) => void;
  timer: ReturnType<typeof setTimeout>;
}

/** setTimeout's largest delay; a longer wait is cut to it. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Requests a server sends to its client (JSON-RPC lets either side ask): ids 1, 2, … of their own, each
 * answered once by `settle` with the peer's response, or with `none` when it times out, cannot be sent,
 * exceeds `maxPending`, or the connection closes (`close`). The owner routes each inbound response to
 * `settle` and calls `close` when its connection ends; nothing is pending after that.
 */
export class OutboundRequests {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private closedReason: string | null = null;

  constructor(private readonly options: OutboundRequestsOptions) {}

  get size(): number {
    return this.pending.size;
  }

  /** Sends `method` and resolves with how it was answered within `timeoutMs`; never rejects. */
  request(method: string, params: unknown, timeoutMs: number): Promise<OutboundAnswer> {
    if (this.closedReason !== null) return Promise.resolve({ kind: 'none', reason: this.closedReason });
    if (this.pending.size >= this.options.maxPending) {
      return Promise.resolve({
        kind: 'none',
        reason: `${this.options.maxPending} requests to the client are already awaiting an answer`,
      });
    }
    const id = this.nextId++;
    return new Promise<OutboundAnswer>((resolve) => {
      const settle = (answer: OutboundAnswer) => {
        const entry = this.pending.get(id);
        if (entry === undefined) return;
        clearTimeout(entry.timer);
        this.pending.delete(id);
        resolve(answer);
      };
      const timer = setTimeout(
        () => settle({ kind: 'none', reason: `no answer to ${method} within ${timeoutMs} ms` }),
        Math.min(Math.max(timeoutMs, 0), MAX_TIMER_MS),
      );
      this.pending.set(id, { settle, timer });
      if (!this.options.send(id, method, params)) settle({ kind: 'none', reason: 'the connection is closed' });
    });
  }

  /** Delivers the peer's answer to request `id`; false when no such request is pending (a stray answer). */
  settle(id: RequestId, answer: { result: unknown } | { error: RpcErrorObject }): boolean {
    if (typeof id !== 'number') return false;
    const entry = this.pending.get(id);
    if (entry === undefined) return false;
    entry.settle(
      'error' in answer ? { kind: 'error', error: answer.error } : { kind: 'result', result: answer.result },
    );
    return true;
  }

  /** Every pending request is answered `none` (`reason`); later ones are never sent. Idempotent. */
  close(reason: string): void {
    if (this.closedReason !== null) return;
    this.closedReason = reason;
    for (const entry of [...this.pending.values()]) entry.settle({ kind: 'none', reason });
  }
}
