// Built-ins through process.getBuiltinModule, not import: an ESM import of a built-in makes Node build its
// facade, which reads every export (node:util's TextDecoder getter alone is ~5 ms of a harness start).
const { createRequire } = process.getBuiltinModule('node:module');

/**
 * Process primitives Node lacks (native/pipe.c). Anonymous pipes: a child spawned with `stdio: 'pipe'`
 * gets libuv's socketpairs, and a program that opens `/dev/stdout`, `/dev/stderr` or `/dev/stdin` (`tee
 * /dev/stderr`, `echo x > /dev/stderr`) fails on a socket with ENXIO; sshd and Codex's exec-server give
 * their children pipes. And for the executor's own hardening: re-exec without a secret in the
 * environment (`execve`, `clearCloexec`), keeping same-user processes out of its memory and
 * `/proc/<pid>/environ` (`setDumpable`), and adopting orphaned descendants (`setChildSubreaper`,
 * `reapChild`).
 */
export interface NativePipe {
  /**
   * A new pipe, `[readFd, writeFd]`, both ends close-on-exec (set atomically, so no child spawned
   * meanwhile inherits either) and blocking. The caller owns both fds. Throws an errno error (`EMFILE`,
   * `ENFILE`; syscall `pipe2`) when no pipe can be made.
   */
  pipe(): [readFd: number, writeFd: number];
  /**
   * Clears close-on-exec on `fd`, so that it survives `execve` (and is inherited by any child spawned
   * meanwhile: call it right before `execve`). Throws an errno error (`EBADF`; syscall `fcntl`).
   */
  clearCloexec(fd: number): void;
  /**
   * Sets close-on-exec on `fd`, so that no program this process starts later inherits it: for an fd another
   * library opened without the flag (node-pty's PTY master, which every later child would otherwise get).
   * Throws an errno error (`EBADF`; syscall `fcntl`).
   */
  setCloexec(fd: number): void;
  /**
   * Replaces this process with `file` (a path, not searched in PATH), `argv` (argv[0] included, at
   * least one) and exactly `env`. Only fds 0-2 and those passed to `clearCloexec` stay open in the new
   * program; every other fd is made close-on-exec first. The new program starts with the signal state of a
   * child_process child: nothing ignored (Node ignores SIGPIPE), nothing blocked. A string holding NUL,
   * an env name that is empty or holds `=`, is a TypeError and nothing runs. Returns only by throwing an
   * errno error (`ENOENT`, `EACCES`…; syscall `execve`), the process then as it was (fd flags, signals).
   */
  execve(file: string, argv: readonly string[], env: Readonly<Record<string, string>>): never;
  /**
   * Makes this process a child subreaper (Linux `prctl(PR_SET_CHILD_SUBREAPER)`): an orphaned descendant,
   * e.g. one that left its group with setsid and outlived its parent, becomes this process's child instead
   * of init's, so it can still be found, killed and must be reaped (`reapChild`). False where the system
   * has no subreapers (not Linux, or Linux before 3.4), and after `setChildSubreaper(false)`, which turns
   * it off again (children adopted meanwhile stay children). Preserved across execve.
   */
  setChildSubreaper(on?: boolean): boolean;
  /** Whether this process is a child subreaper (`prctl(PR_GET_CHILD_SUBREAPER)`). */
  isChildSubreaper(): boolean;
  /**
   * `prctl(PR_SET_DUMPABLE)`: not dumpable, `/proc/<pid>/` (environ, mem, fds) belongs to root and other
   * processes of the same user cannot ptrace this one or read it. Linux only: elsewhere a no-op. Reset to
   * dumpable by execve.
   */
  setDumpable(dumpable: boolean): void;
  /** `prctl(PR_GET_DUMPABLE)`; true off Linux. */
  isDumpable(): boolean;
  /**
   * `waitpid(pid, WNOHANG)` for a child libuv does not know (an adopted orphan): true when it had exited
   * and is now reaped, false while it runs. Never call it on a child_process or node-pty child: their exit
   * would be lost. Throws an errno error (`ECHILD`: not a child of this process; syscall `waitpid`).
   */
  reapChild(pid: number): boolean;
  /**
   * Makes every open fd above `fd` close-on-exec (none is closed, 0 to `fd` are untouched), so that no
   * program this process starts later inherits one it did not hand over itself (a child's stdio array
   * still does: libuv dup2s those into place). Returns how many lacked the flag: Node's and libuv's own
   * fds already have it, so these are the inherited ones. The walk is over `/proc/self/fd` (`/dev/fd`,
   * else every number below the fd limit), then `close_range(fd + 1, ~0U, CLOSE_RANGE_CLOEXEC)` where
   * Linux has it (5.11). Throws an errno error (syscall `fcntl`) when a flag cannot be set.
   */
  setCloexecAbove(fd: number): number;
  /**
   * Raises the capacity of the pipe `fd` is an end of (Linux's default is 64 KiB) to at least `bytes`
   * (`fcntl(F_SETPIPE_SZ)`; the kernel rounds up to a power-of-two number of pages); never lowers it. Returns
   * the capacity after: the old one where the user's pipe limits refuse more (`/proc/sys/fs/pipe-max-size`,
   * `pipe-user-pages-*`), 0 when `fd` is not a pipe or pipes cannot be resized here (not Linux). A larger
   * pipe lets a writer hand over more per wakeup and a reader find more waiting (`| sha256sum`). Throws an
   * errno error (`EBADF`; syscall `fcntl`) for a closed fd.
   */
  growPipe(fd: number, bytes: number): number;
  /**
   * A connected pair of AF_UNIX stream sockets, `[fd, fd]`, both close-on-exec and blocking, to pass a
   * descriptor to or from a child (`sendFd`, `receiveFd`): hand one end over in the child's stdio array and
   * close it here. The caller owns both fds. Throws an errno error (`EMFILE`; syscall `socketpair`).
   */
  socketPair(): [number, number];
  /**
   * Sends `fd` (one byte with it, SCM_RIGHTS) over `socket`, an end of `socketPair()`; the receiver gets its
   * own descriptor of the same open file. Blocks while the socket is full. Throws an errno error (`EBADF`,
   * `EPIPE` when the other end is closed; syscall `sendmsg`).
   */
  sendFd(socket: number, fd: number): void;
  /**
   * The descriptor waiting on `socket` (sent by `sendFd`), close-on-exec and owned by the caller; null when
   * none is: nothing sent yet (it never blocks), or the peer closed or sent a byte without a descriptor. Throws
   * an errno error (`EBADMSG` when several came in one message, all then closed; syscall `recvmsg`).
   */
  receiveFd(socket: number): number | null;
  /**
   * The pid of the process that made `socket`'s peer (SO_PEERCRED; for an end of `socketPair()`, whoever called
   * it), as this process's PID namespace numbers it: a sandboxed helper in a PID namespace of its own makes a
   * pair and sends one end (`sendFd`), so that its parent learns the helper's pid. Throws an errno error
   * (`ENOTSOCK`, `ENOSYS` off Linux; syscall `getsockopt`).
   */
  peerPid(socket: number): number;
  /**
   * Where the accepted TCP connection `fd` was headed before the netfilter NAT redirected it to this listener
   * (`SO_ORIGINAL_DST`, `IP6T_SO_ORIGINAL_DST` for an IPv6 socket): `{address, port}`, the address as
   * `net.isIP` reads it. A connection that was not redirected gives its own destination. Throws an errno error
   * (`ENOENT` when conntrack does not track it, `ENOTSOCK`, `ENOSYS` off Linux; syscall `getsockopt`).
   */
  originalDestination(fd: number): { address: string; port: number };
  /**
   * A listening AF_UNIX stream socket bound to `path` (blocking, close-on-exec), for a process that waits in
   * `acceptUnix` with nothing else to do. The caller removes a stale socket first, sets the path's mode after
   * and owns the fd. Throws an errno error (`EADDRINUSE`, `ENOENT`; syscall `bind`); a path that does not fit
   * `sun_path` (107 bytes on Linux) or holds NUL is a TypeError.
   */
  listenUnix(path: string): number;
  /**
   * Waits (blocking this thread) for a connection on `listener` and accepts it: a blocking, close-on-exec
   * socket the caller owns. Null as soon as `watch` is readable or hung up (a pipe from this process's parent:
   * the wait ends with the parent). Throws an errno error (syscall `accept`).
   */
  acceptUnix(listener: number, watch: number): number | null;
  /**
   * A blocking, close-on-exec AF_UNIX stream socket connected to `path`. It never waits for room in the
   * listener's backlog: that is `EAGAIN`. Throws an errno error (`ENOENT`, `ECONNREFUSED` for a socket nobody
   * listens on, `EAGAIN`; syscall `connect`).
   */
  connectUnix(path: string): number;
  /** Waits up to `ms` for `fd` to be readable (or hung up): false when it was not. Throws an errno error (`EBADF`; syscall `poll`). */
  waitReadable(fd: number, ms: number): boolean;
  /** The user id of the process at the other end of the AF_UNIX socket (SO_PEERCRED). Throws an errno error (`ENOSYS` off Linux; syscall `getsockopt`). */
  peerUid(socket: number): number;
  /** `dup2(fd, target)`: `target` (closed first if open) becomes another descriptor of `fd`'s open file, without close-on-exec. Throws an errno error (`EBADF`; syscall `dup2`). */
  dup2(fd: number, target: number): void;
  /**
   * Ends this process at once with `status` (`_exit`): no 'exit' event, no atexit handlers, none of Node's
   * teardown, and nothing still buffered is written. For a process that has written everything it will and
   * only waits to end: Node's teardown (joining V8's threads, unmapping its heap) takes several milliseconds.
   */
  exitNow(status: number): never;
}

interface Binding {
  /** The two fds, or -errno. */
  pipe(): [number, number] | number;
  /** 0 or -errno. */
  clearCloexec(fd: number): number;
  /** 0 or -errno. */
  setCloexec(fd: number): number;
  /** -errno (it returns only on failure). */
  execve(file: string, argv: readonly string[], env: string[]): number;
  /** 1 when on, 0 when off or unsupported, or -errno. */
  setChildSubreaper(on: boolean): number;
  isChildSubreaper(): boolean;
  /** 0 or -errno. */
  setDumpable(dumpable: boolean): number;
  isDumpable(): boolean;
  /** 1 reaped, 0 running, or -errno. */
  reapChild(pid: number): number;
  /** How many fds lacked close-on-exec, or -errno. */
  setCloexecAbove(fd: number): number;
  /** The capacity after, 0 when not a pipe, or -errno. */
  growPipe(fd: number, bytes: number): number;
  /** The two fds, or -errno. */
  socketPair(): [number, number] | number;
  /** 0 or -errno. */
  sendFd(socket: number, fd: number): number;
  /** The fd, or -errno (-EAGAIN: nothing waiting; -ENODATA: none came). */
  receiveFd(socket: number): number;
  /** The pid, or -errno. */
  peerPid(socket: number): number;
  /** `[address, port]`, or -errno. */
  originalDestination(fd: number): [string, number] | number;
  /** The fd, or -errno. */
  listenUnix(path: string): number;
  /** The fd, or -errno (-ECANCELED: `watch` became readable). */
  acceptUnix(listener: number, watch: number): number;
  /** The fd, or -errno. */
  connectUnix(path: string): number;
  /** 1 readable, 0 not within ms, or -errno. */
  waitReadable(fd: number, ms: number): number;
  /** The uid, or -errno. */
  peerUid(socket: number): number;
  /** 0 or -errno. */
  dup2(fd: number, target: number): number;
  exitNow(status: number): never;
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
      setCloexec(fd) {
        check(binding.setCloexec(fd), 'fcntl');
      },
      clearCloexec(fd) {
        check(binding.clearCloexec(fd), 'fcntl');
      },
      execve(file, argv, env) {
        const errno = binding.execve(file, argv, envStrings(env));
        throw errnoError(errno, 'execve', file);
      },
      setChildSubreaper(on = true) {
        if (typeof on !== 'boolean') throw new TypeError('setChildSubreaper(on) takes a boolean');
        return check(binding.setChildSubreaper(on), 'prctl') === 1;
      },
      isChildSubreaper: () => binding.isChildSubreaper(),
      setDumpable(dumpable) {
        if (typeof dumpable !== 'boolean') throw new TypeError('setDumpable(dumpable) takes one boolean');
        check(binding.setDumpable(dumpable), 'prctl');
      },
      isDumpable: () => binding.isDumpable(),
      reapChild(pid) {
        if (!Number.isSafeInteger(pid) || pid <= 0) throw new TypeError(`reapChild: not a pid: ${pid}`);
        return check(binding.reapChild(pid), 'waitpid') === 1;
      },
      setCloexecAbove(fd) {
        fdArgument('setCloexecAbove', fd);
        return check(binding.setCloexecAbove(fd), 'fcntl');
      },
      growPipe(fd, bytes) {
        fdArgument('growPipe', fd);
        if (!Number.isSafeInteger(bytes) || bytes < 0 || bytes > 0x7fffffff) {
          throw new TypeError(`growPipe: not a byte count: ${bytes}`);
        }
        return check(binding.growPipe(fd, bytes), 'fcntl');
      },
      socketPair() {
        const fds = binding.socketPair();
        if (typeof fds === 'number') throw errnoError(fds, 'socketpair');
        return fds;
      },
      sendFd(socket, fd) {
        fdArgument('sendFd', socket);
        fdArgument('sendFd', fd);
        check(binding.sendFd(socket, fd), 'sendmsg');
      },
      receiveFd(socket) {
        fdArgument('receiveFd', socket);
        const fd = binding.receiveFd(socket);
        if (fd === -ERRNO.EAGAIN || fd === -ERRNO.ENODATA) return null;
        return check(fd, 'recvmsg');
      },
      peerPid(socket) {
        fdArgument('peerPid', socket);
        return check(binding.peerPid(socket), 'getsockopt');
      },
      originalDestination(fd) {
        fdArgument('originalDestination', fd);
        const found = binding.originalDestination(fd);
        if (typeof found === 'number') throw errnoError(found, 'getsockopt');
        return { address: found[0], port: found[1] };
      },
      listenUnix(path) {
        return check(binding.listenUnix(path), 'bind');
      },
      acceptUnix(listener, watch) {
        fdArgument('acceptUnix', listener);
        fdArgument('acceptUnix', watch);
        const fd = binding.acceptUnix(listener, watch);
        return fd === -ERRNO.ECANCELED ? null : check(fd, 'accept');
      },
      connectUnix(path) {
        return check(binding.connectUnix(path), 'connect');
      },
      waitReadable(fd, ms) {
        fdArgument('waitReadable', fd);
        if (!Number.isSafeInteger(ms) || ms < 0 || ms > 0x7fffffff)
          throw new TypeError(`waitReadable: not milliseconds: ${ms}`);
        return check(binding.waitReadable(fd, ms), 'poll') === 1;
      },
      peerUid(socket) {
        fdArgument('peerUid', socket);
        return check(binding.peerUid(socket), 'getsockopt');
      },
      dup2(fd, target) {
        fdArgument('dup2', fd);
        fdArgument('dup2', target);
        check(binding.dup2(fd, target), 'dup2');
      },
      exitNow(status) {
        if (!Number.isInteger(status) || status < 0 || status > 255) {
          throw new TypeError(`exitNow: not an exit status: ${status}`);
        }
        return binding.exitNow(status);
      },
    },
  };
}

const ERRNO = process.getBuiltinModule('node:os').constants.errno;

function fdArgument(method: string, fd: unknown): void {
  if (!Number.isSafeInteger(fd) || (fd as number) < 0) throw new TypeError(`${method}: not an fd: ${String(fd)}`);
}

/** libuv's map lacks some (ECHILD): the name from os.constants. */
function errnoName(errno: number): string {
  const entry = Object.entries(process.getBuiltinModule('node:os').constants.errno).find(
    ([, value]) => value === -errno,
  );
  return entry?.[0] ?? `Unknown system error ${errno}`;
}

/** A binding's result: a negative number is -errno. */
function check(result: number, syscall: string): number {
  if (result < 0) throw errnoError(result, syscall);
  return result;
}

/**
 * `NAME=value` strings for execve. Names are checked here (the C side cannot tell a name's `=` from the
 * separator); NUL anywhere is refused by the addon too, for argv and file as well.
 */
function envStrings(env: Readonly<Record<string, string>>): string[] {
  if (typeof env !== 'object' || env === null) throw new TypeError("execve's env must be an object of strings");
  return Object.entries(env).map(([name, value]) => {
    if (name === '' || name.includes('=') || name.includes('\0')) {
      throw new TypeError(`execve's env: name ${JSON.stringify(name)} must be non-empty without = or NUL`);
    }
    if (typeof value !== 'string') throw new TypeError(`execve's env: ${name} must be a string`);
    return `${name}=${value}`;
  });
}

/**
 * The error Node's own fs calls throw: `EMFILE: too many open files, pipe2` (`ENOENT: no such file or
 * directory, execve '/no/such'` with a path), with code, errno, syscall and path.
 */
function errnoError(errno: number, syscall: string, path?: string): NodeJS.ErrnoException {
  const [code, description] = process.getBuiltinModule('node:util').getSystemErrorMap().get(errno) ?? [
    errnoName(errno),
    `errno ${-errno}`,
  ];
  const where = path === undefined ? syscall : `${syscall} '${path}'`;
  const error: NodeJS.ErrnoException = new Error(`${code}: ${description}, ${where}`);
  error.code = code;
  error.errno = errno;
  error.syscall = syscall;
  if (path !== undefined) error.path = path;
  return error;
}
