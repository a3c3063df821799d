/**
 * The one table of JSON-RPC error codes (codex-rs/exec-server/src/rpc.rs). The code is the contract;
 * messages are for humans.
 */
export const ErrorCode = {
  invalidRequest: -32600,
  methodNotFound: -32601,
  invalidParams: -32602,
  internal: -32603,
  notFound: -32004,
  sessionAlreadyAttached: -32010,
} as const;
export type ErrorCodeName = keyof typeof ErrorCode;

/** A JSON-RPC error with a wire code; thrown by handlers, serialized at one choke point. */
export class RpcError extends Error {
  static readonly NAME = 'RpcError';
  override readonly name = RpcError.NAME;
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
  ) {
    super(message);
  }

  static invalidRequest(message: string): RpcError {
    return new RpcError(ErrorCode.invalidRequest, message);
  }
  static invalidParams(message: string): RpcError {
    return new RpcError(ErrorCode.invalidParams, message);
  }
  static methodNotFound(method: string): RpcError {
    return new RpcError(ErrorCode.methodNotFound, `exec-server stub does not implement \`${method}\` yet`);
  }
  static internal(message: string): RpcError {
    return new RpcError(ErrorCode.internal, message);
  }

  /** Matches by name, which survives duplicate package copies where instanceof fails. */
  static is(value: unknown): value is RpcError {
    return value instanceof Error && value.name === RpcError.NAME && typeof (value as RpcError).code === 'number';
  }
}
