/**
 * Which set-up failures of a secure channel another attempt may get past, kept apart from `dial.ts` (which
 * loads ws, the relay frames and the secure stream on first use) so that the client's retry logic can
 * classify a failure without loading that machinery.
 */

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
