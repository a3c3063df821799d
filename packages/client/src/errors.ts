export type TetherErrorCode =
  | 'invalid_argument'
  | 'invalid_state'
  | 'registry'
  | 'unauthorized'
  | 'not_found'
  | 'offline'
  | 'revoked'
  | 'connect_failed'
  | 'handshake_failed'
  | 'closed'
  | 'protocol'
  | 'output_lost'
  | 'executor_key_changed'
  | 'rpc';

/**
 * Every failure the SDK reports. `code` is stable; `rpcCode` carries the executor's JSON-RPC error code
 * when there is one. Messages never contain API keys, authorizations or signed URLs.
 */
export class TetherError extends Error {
  override readonly name: string = 'TetherError';
  constructor(
    readonly code: TetherErrorCode,
    message: string,
    options?: { cause?: unknown; rpcCode?: number; status?: number },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.rpcCode = options?.rpcCode;
    this.status = options?.status;
  }
  readonly rpcCode: number | undefined;
  readonly status: number | undefined;
}

/**
 * The executor's public key in a `/connect` bundle is not the one this session trusts: a reconnect's bundle
 * named another key than the session's first handshake, or the key differs from `executorPublicKey`
 * pinned up front. Nothing is sent to that peer; the session is not resumed with it.
 */
export class ExecutorKeyChangedError extends TetherError {
  override readonly name: string = 'ExecutorKeyChangedError';
  constructor(message: string) {
    super('executor_key_changed', message);
  }
}

/**
 * The codes that say the executor could not be reached or kept, or would not have us: the registry, the
 * relay or the executor unreachable or gone, a refused or revoked key, a failed handshake, a session lost
 * (with its output). The failure is the connection's, not the command's: the CLI exits 255 for these, as
 * ssh does. Not `protocol`: an answer the SDK refuses (a hostile listing, a bad digest) fails the request.
 */
export const CONNECTION_ERROR_CODES: ReadonlySet<TetherErrorCode> = new Set<TetherErrorCode>([
  'registry',
  'unauthorized',
  'not_found',
  'offline',
  'revoked',
  'connect_failed',
  'handshake_failed',
  'closed',
  'output_lost',
  'executor_key_changed',
]);

/** Whether `err` is a TetherError with one of CONNECTION_ERROR_CODES. */
export function isConnectionError(err: unknown): err is TetherError {
  return err instanceof TetherError && CONNECTION_ERROR_CODES.has(err.code);
}
