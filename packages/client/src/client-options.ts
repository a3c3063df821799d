/** How an ExecServerClient connects, reconnects and reports: its options and the dialer it is given. */
import type { MessageTransport } from '@tether/jsonrpc';
import type { DialPhase } from './dial.js';

/**
 * Opens a fresh transport to the executor (a new socket, or a new bundle + stream + handshake). `onPhase`,
 * when given, is told as each step of the dial begins.
 */
export type Dialer = (signal: AbortSignal, onPhase?: (phase: DialPhase) => void) => Promise<MessageTransport>;

/**
 * One step of setting a connection up (`ExecServerClientOptions.onProgress`), reported as it begins: a dial's
 * steps, then `initialize`; `backoff` is the pause before another attempt; `connected` and `failed` end it.
 */
export interface ConnectProgress {
  /** The first connect, or a resume of the session after its transport dropped. */
  kind: 'connect' | 'resume';
  phase: DialPhase | 'initialize' | 'backoff' | 'connected' | 'failed';
  /** 1 for the first attempt of this connect or resume. */
  attempt: number;
  /** `backoff`: how long the pause is (ms). */
  delayMs?: number;
  /** `failed`, or `backoff`: why the attempt failed (never a credential). */
  error?: string;
}

export interface ReconnectOptions {
  /**
   * Give up after this long without a resumed session (default 25 s, inside the executor's 30 s TTL); an
   * attempt still under way then is given up wherever it is.
   */
  timeoutMs?: number;
}

export interface ConnectRetryOptions {
  /**
   * Stop trying to set the connection up after this long (default 20 s): an attempt still under way then is
   * given up wherever it is (its dial's signal is aborted; one begun at the very end gets 1 s).
   */
  timeoutMs?: number;
}

export interface ExecServerClientOptions {
  dial: Dialer;
  /**
   * Set-up (dial, handshake, initialize) is tried again with backoff after a failure that may pass (a
   * refused or cut socket, a handshake cut short, a connection closed before initialize answered), within
   * this bound (default 20 s). A refusal (authorization, unknown environment, protocol) is final at once.
   * `false`: one attempt.
   */
  connectRetry?: ConnectRetryOptions | false;
  clientName?: string;
  /** Default timeout of one call (default 60 s; reads with waitMs get that on top). */
  callTimeoutMs?: number;
  /** Re-dial and resume the session when the transport drops (default on). `false` disables. */
  reconnect?: ReconnectOptions | false;
  /** Logs transport drops and reconnects. */
  onStatus?: (status: 'disconnected' | 'reconnected' | 'lost', detail: string) => void;
  /**
   * Told as each step of a connect or resume begins (registry call, relay upgrade, handshake, initialize,
   * backoff), for a caller that wants to show or log where a slow connect is. Never called when absent.
   */
  onProgress?: (progress: ConnectProgress) => void;
}
