export type TetherErrorCode =
  | 'invalid_argument'
  | 'invalid_state'
  | 'registry'
  | 'unauthorized'
  | 'not_found'
  | 'offline'
  | 'connect_failed'
  | 'handshake_failed'
  | 'closed'
  | 'protocol'
  | 'output_lost'
  | 'rpc';

/**
 * Every failure the SDK reports. `code` is stable; `rpcCode` carries the executor's JSON-RPC error code
 * when there is one. Messages never contain API keys, authorizations or signed URLs.
 */
export class TetherError extends Error {
  override readonly name = 'TetherError';
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
