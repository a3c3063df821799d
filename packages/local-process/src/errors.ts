import type { ProcessErrorCode } from './types.js';

/**
 * The one error type of this package. `code` is the contract (the executor maps it to a JSON-RPC
 * error in one table); `message` is for humans and mirrors the Codex exec-server texts.
 */
export class ProcessError extends Error {
  override readonly name = 'ProcessError';
  readonly code: ProcessErrorCode;
  /** For `spawn_failed` caused by the OS: its errno name (`ENOENT`, `EACCES`, `ENOTDIR`, …). */
  readonly osCode: string | undefined;

  constructor(code: ProcessErrorCode, message: string, options?: { cause?: unknown; osCode?: string }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.osCode = options?.osCode;
  }
}
