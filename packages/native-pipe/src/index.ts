import { createRequire } from 'node:module';
import { getSystemErrorMap } from 'node:util';

/**
 * Anonymous pipes (native/pipe.c), which Node cannot make: a child spawned with `stdio: 'pipe'` gets
 * libuv's socketpairs, and a program that opens `/dev/stdout`, `/dev/stderr` or `/dev/stdin` (`tee
 * /dev/stderr`, `echo x > /dev/stderr`) fails on a socket with ENXIO. sshd and Codex's exec-server give
 * their children pipes.
 */
export interface NativePipe {
  /**
   * A new pipe, `[readFd, writeFd]`, both ends close-on-exec (set atomically, so no child spawned
   * meanwhile inherits either) and blocking. The caller owns both fds. Throws an errno error (`EMFILE`,
   * `ENFILE`; syscall `pipe2`) when no pipe can be made.
   */
  pipe(): [readFd: number, writeFd: number];
}

interface Binding {
  /** The two fds, or -errno. */
  pipe(): [number, number] | number;
}

let loaded: { native: NativePipe | null; error: string | null } | undefined;

/**
 * The native pipe, or null when the addon was not built (no compiler or Node headers at install) or
 * `TETHER_NATIVE_PIPE=off`; `nativePipeUnavailableReason()` then says why.
 */
export function loadNativePipe(): NativePipe | null {
  loaded ??= load();
  return loaded.native;
}

export function nativePipeUnavailableReason(): string | null {
  loaded ??= load();
  return loaded.error;
}

function load(): { native: NativePipe | null; error: string | null } {
  if (process.env.TETHER_NATIVE_PIPE === 'off') return { native: null, error: 'TETHER_NATIVE_PIPE=off' };
  let binding: Binding;
  try {
    // src/ and dist/ both sit beside native/.
    binding = createRequire(import.meta.url)('../native/build/Release/tether_pipe.node') as Binding;
  } catch (err) {
    return { native: null, error: (err as Error).message.split('\n')[0] ?? 'cannot load' };
  }
  return {
    error: null,
    native: {
      pipe() {
        const fds = binding.pipe();
        if (typeof fds === 'number') throw errnoError(fds, 'pipe2');
        return fds;
      },
    },
  };
}

/** The error Node's own fs calls throw: `EMFILE: too many open files, pipe2`, with code, errno and syscall. */
function errnoError(errno: number, syscall: string): NodeJS.ErrnoException {
  const [code, description] = getSystemErrorMap().get(errno) ?? [`Unknown system error ${errno}`, 'unknown error'];
  const error: NodeJS.ErrnoException = new Error(`${code}: ${description}, ${syscall}`);
  error.code = code;
  error.errno = errno;
  error.syscall = syscall;
  return error;
}
