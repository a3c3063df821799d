import { constants as osConstants } from 'node:os';
import { ErrorCode, RpcError } from '@tether/exec-protocol';

/**
 * strerror texts of musl libc, which the Codex binary is linked against; Rust prints an `io::Error`
 * as `<strerror> (os error <n>)`, and Codex returns that text as the JSON-RPC message.
 */
const MUSL_STRERROR: Record<string, string> = {
  EPERM: 'Operation not permitted',
  ENOENT: 'No such file or directory',
  EINTR: 'Interrupted system call',
  EIO: 'I/O error',
  ENXIO: 'No such device or address',
  EBADF: 'Bad file descriptor',
  EAGAIN: 'Resource temporarily unavailable',
  ENOMEM: 'Out of memory',
  EACCES: 'Permission denied',
  EBUSY: 'Resource busy',
  EEXIST: 'File exists',
  EXDEV: 'Cross-device link',
  ENODEV: 'No such device',
  ENOTDIR: 'Not a directory',
  EISDIR: 'Is a directory',
  EINVAL: 'Invalid argument',
  ENFILE: 'Too many open files in system',
  EMFILE: 'No file descriptors available',
  ETXTBSY: 'Text file busy',
  EFBIG: 'File too large',
  ENOSPC: 'No space left on device',
  ESPIPE: 'Invalid seek',
  EROFS: 'Read-only file system',
  EMLINK: 'Too many links',
  EPIPE: 'Broken pipe',
  ENAMETOOLONG: 'Filename too long',
  ELOOP: 'Symbolic link loop',
  ENOTEMPTY: 'Directory not empty',
  EDQUOT: 'Quota exceeded',
  ECONNREFUSED: 'Connection refused',
  ETIMEDOUT: 'Operation timed out',
};

/** Rust's display of an OS error: `No such file or directory (os error 2)`; null for non-OS errors. */
export function osErrorText(err: unknown): string | null {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  if (typeof code !== 'string') return null;
  const errno = (osConstants.errno as Record<string, number>)[code];
  if (errno === undefined) return null;
  return `${MUSL_STRERROR[code] ?? code} (os error ${errno})`;
}

/**
 * The one mapping of filesystem failures to JSON-RPC errors (Codex `file_system_handler.rs`): not
 * found → -32004, permission denied or invalid input → -32600, anything else → -32603; the message is
 * the OS error text.
 */
export function fsError(err: unknown): RpcError {
  if (RpcError.is(err)) return err;
  const text = osErrorText(err);
  if (text === null) return RpcError.internal(err instanceof Error ? err.message : String(err));
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ENOENT') return new RpcError(ErrorCode.notFound, text);
  if (code === 'EACCES' || code === 'EPERM' || code === 'EINVAL') return RpcError.invalidRequest(text);
  return RpcError.internal(text);
}

/** Runs a filesystem operation, translating OS errors with `fsError`. */
export async function osCall<T>(operation: () => Promise<T>): Promise<T> {
  try {
    return await operation();
  } catch (err) {
    throw fsError(err);
  }
}
