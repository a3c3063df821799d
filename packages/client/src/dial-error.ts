/**
 * Which set-up failures another attempt may get past (the client's retry policy), kept apart from `dial.ts`
 * (which loads ws, the relay frames and the secure stream on first use) so that the client can classify a
 * failure without loading that machinery.
 */
import { ConnectionClosedError, RpcTimeoutError } from '@tether/jsonrpc';
import { TetherError, type TetherErrorCode } from './errors.js';

/**
 * Resets during set-up that a new attempt may get past: the relay's word that the executor is not (or no
 * longer, or not yet) there or is busy, and the executor's own stream limit. A refusal, a relay protocol
 * error or a handshake-frame limit is final.
 */
export const PASSING_RESETS: ReadonlySet<string> = new Set([
  'environment_offline',
  'environment_closed',
  'environment_replaced',
  'registration_mismatch',
  'relay_shutdown',
  'relay_backpressure',
  'stream_limit',
  'duplicate_stream',
  'idle_timeout',
  'executor_stream_limit',
  'executor_backpressure',
]);

/**
 * Whether `cause` (the cause of a `handshake_failed` error) is a SecureStreamError that another attempt may
 * get past: a passing reset, a cut or a timeout. Recognised by its name (`SecureStreamError.NAME`), not by
 * `instanceof`, which would need the secure-stream module loaded.
 */
export function secureStreamFailureMayPass(cause: unknown): boolean {
  if (!(cause instanceof Error) || cause.name !== 'SecureStreamError') return false;
  const { code, resetReason } = cause as Error & { code?: unknown; resetReason?: unknown };
  if (code === 'reset') return typeof resetReason === 'string' && PASSING_RESETS.has(resetReason);
  return code === 'closed' || code === 'timeout';
}

/**
 * The code a connect given up at its deadline reports: that of what its last attempt failed with when that is
 * a TetherError (`registry` for a registry that cannot be reached, say: the thing to look at), else
 * `connect_failed`.
 */
export function lastCode(err: unknown): TetherErrorCode {
  let inner = err;
  while (inner instanceof TetherError && inner.code === 'connect_failed' && inner.cause instanceof TetherError) {
    inner = inner.cause;
  }
  return inner instanceof TetherError ? inner.code : 'connect_failed';
}

/** Failures of a resume that another attempt cannot get past: the session is given up at once. */
export const FINAL_ON_RESUME: ReadonlySet<string> = new Set([
  'protocol',
  'unauthorized',
  'revoked',
  'executor_key_changed',
]);

/** A set-up failure that trying again may get past (the transport, not the peer, said no). */
export function mayPass(err: unknown): boolean {
  if (err instanceof ConnectionClosedError || err instanceof RpcTimeoutError) return true;
  if (!(err instanceof TetherError)) return false;
  // The registry could not be reached (no answer at all: refused, reset, timed out); an answer is final.
  if (err.code === 'registry') return err.status === undefined && err.cause instanceof Error;
  if (err.code === 'connect_failed') {
    // An HTTP answer at the upgrade is the relay's word (an expired URL gets one fresh bundle already).
    return err.status === undefined || err.status === 429 || err.status >= 500;
  }
  if (err.code === 'handshake_failed') return secureStreamFailureMayPass(err.cause);
  // The connection closed during initialize (the caller checks that the client itself was not closed).
  return err.code === 'closed';
}
