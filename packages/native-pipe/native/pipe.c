/*
 * Process primitives Node lacks, as one small N-API addon.
 *
 *   pipe() -> [readFd, writeFd]        both ends close-on-exec and blocking; -errno when none can be made
 *   clearCloexec(fd) -> 0 | -errno     keeps fd open across execve (and remembers it: see execve)
 *   setCloexec(fd) -> 0 | -errno       closes fd at every execve (for an fd another library opened without it)
 *   execve(file, argv, envStrings)     replaces the process; returns -errno only when it cannot
 *   setChildSubreaper(on = true) -> 1 | 0 | -errno   prctl(PR_SET_CHILD_SUBREAPER): 1 when on; 0 when
 *                                      off or unsupported
 *   isChildSubreaper() -> boolean      prctl(PR_GET_CHILD_SUBREAPER)
 *   setDumpable(bool) -> 0 | -errno    prctl(PR_SET_DUMPABLE); a no-op off Linux
 *   isDumpable() -> boolean            prctl(PR_GET_DUMPABLE); true off Linux
 *   reapChild(pid) -> 1 | 0 | -errno   waitpid(pid, WNOHANG): reaped, still running, or not our child
 *   setCloexecAbove(fd) -> n | -errno  every open fd above fd becomes close-on-exec (none is closed); n is
 *                                      how many lacked it
 *   growPipe(fd, bytes) -> n | -errno  a pipe's capacity raised to at least bytes where the user's pipe limits
 *                                      allow (F_SETPIPE_SZ); n is the capacity after, 0 when fd is not a pipe
 *                                      or pipes cannot be resized here (not Linux)
 *   socketPair() -> [fd, fd] | -errno  a connected AF_UNIX stream pair, both ends close-on-exec and blocking
 *   sendFd(socket, fd) -> 0 | -errno   sends fd over the socket (SCM_RIGHTS, with one byte)
 *   receiveFd(socket) -> fd | -errno   the one descriptor waiting on the socket, close-on-exec; never blocks:
 *                                      -EAGAIN when nothing is waiting, -ENODATA when the peer closed or sent
 *                                      a byte without one, -EBADMSG (all closed) when it sent several
 *   peerPid(socket) -> pid | -errno    SO_PEERCRED: the pid (in this process's PID namespace) of the process
 *                                      that made the AF_UNIX socket's peer (a socketpair's maker); -ENOSYS off
 *                                      Linux
 *   listenUnix(path) -> fd | -errno     a blocking AF_UNIX stream socket bound to path and listening,
 *                                      close-on-exec
 *   acceptUnix(listener, watch) -> fd | -errno   waits (poll) for a connection and accepts it, blocking and
 *                                      close-on-exec; -ECANCELED as soon as `watch` is readable or hung up
 *   connectUnix(path) -> fd | -errno    a blocking, close-on-exec AF_UNIX stream socket connected to path;
 *                                      -EAGAIN when the listener's backlog is full (it never waits)
 *   waitReadable(fd, ms) -> 1 | 0 | -errno   poll: 1 when fd is readable or hung up, 0 after ms
 *   peerUid(socket) -> uid | -errno    SO_PEERCRED: the user id of the socket peer's process; -ENOSYS off Linux
 *   dup2(fd, target) -> 0 | -errno     dup2: target becomes fd's open file, without close-on-exec
 *   exitNow(status)                    _exit(status): ends the process at once, without Node's teardown
 *   originalDestination(fd) -> [address, port] | -errno   SO_ORIGINAL_DST (IPv4) or IP6T_SO_ORIGINAL_DST
 *                                      (IPv6): where a connection redirected by the netfilter NAT was headed;
 *                                      -ENOENT when the connection is not tracked, -ENOSYS off Linux
 *
 * Pipes: close-on-exec is set atomically (pipe2): a child spawned by another thread between the pipe's
 * creation and a separate fcntl would otherwise keep an end open, and a write end held by a stranger means
 * the reader never sees EOF. Blocking, because the child's ends are meant to be handed over as they are;
 * libuv makes the parent's ends non-blocking itself when it opens them.
 *
 * Strings from JavaScript (execve's file, argv and environment) may hold NUL, which C would silently cut
 * there (`"ls\0-la"` would run `ls`): any such string is a TypeError, and nothing is executed.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <node_api.h>
#ifdef __linux__
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char **environ;

static int make_pipe(int fds[2]) {
#ifdef __APPLE__
  /* No pipe2 on macOS: the window between pipe and fcntl is open only to forks from other threads. */
  if (pipe(fds) != 0) return -1;
  if (fcntl(fds[0], F_SETFD, FD_CLOEXEC) != 0 || fcntl(fds[1], F_SETFD, FD_CLOEXEC) != 0) {
    int saved = errno;
    close(fds[0]);
    close(fds[1]);
    errno = saved;
    return -1;
  }
  return 0;
#else
  return pipe2(fds, O_CLOEXEC);
#endif
}

/* A pair of fds as `[first, second]`; both closed when the array cannot be made (nobody would learn them). */
static napi_value fd_pair_result(napi_env env, int fds[2]) {
  napi_value result, first, second;
  if (napi_create_array_with_length(env, 2, &result) != napi_ok || napi_create_int32(env, fds[0], &first) != napi_ok ||
      napi_create_int32(env, fds[1], &second) != napi_ok || napi_set_element(env, result, 0, first) != napi_ok ||
      napi_set_element(env, result, 1, second) != napi_ok) {
    close(fds[0]);
    close(fds[1]);
    return NULL;
  }
  return result;
}

static napi_value new_pipe(napi_env env, napi_callback_info info) {
  (void)info;
  int fds[2];
  napi_value result;
  if (make_pipe(fds) != 0) {
    if (napi_create_int32(env, -errno, &result) != napi_ok) return NULL;
    return result;
  }
  return fd_pair_result(env, fds);
}

static napi_value int_result(napi_env env, int32_t value) {
  napi_value result;
  if (napi_create_int32(env, value, &result) != napi_ok) return NULL;
  return result;
}

static napi_value bool_result(napi_env env, int value) {
  napi_value result;
  if (napi_get_boolean(env, value != 0, &result) != napi_ok) return NULL;
  return result;
}

static napi_value type_error(napi_env env, const char *message) {
  napi_throw_type_error(env, "ERR_INVALID_ARG_TYPE", message);
  return NULL;
}

/* A non-negative int32 argument (an fd or a pid), or a TypeError. */
static int int_argument(napi_env env, napi_callback_info info, const char *usage, int32_t *value) {
  size_t argc = 1;
  napi_value argv[1];
  napi_valuetype type;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 1 ||
      napi_typeof(env, argv[0], &type) != napi_ok || type != napi_number ||
      napi_get_value_int32(env, argv[0], value) != napi_ok || *value < 0) {
    type_error(env, usage);
    return 0;
  }
  return 1;
}

/* Two non-negative int32 arguments (fds, a byte count), or a TypeError. */
static int two_int_arguments(napi_env env, napi_callback_info info, const char *usage, int32_t *a, int32_t *b) {
  size_t argc = 2;
  napi_value argv[2];
  napi_valuetype types[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 2 ||
      napi_typeof(env, argv[0], &types[0]) != napi_ok || napi_typeof(env, argv[1], &types[1]) != napi_ok ||
      types[0] != napi_number || types[1] != napi_number || napi_get_value_int32(env, argv[0], a) != napi_ok ||
      napi_get_value_int32(env, argv[1], b) != napi_ok || *a < 0 || *b < 0) {
    type_error(env, usage);
    return 0;
  }
  return 1;
}

/*
 * The fds the caller cleared close-on-exec on: execve keeps these (and 0-2) and no other. A growable list,
 * as the caller may hand over several; deduplicated.
 */
static int *kept_fds = NULL;
static size_t kept_count = 0, kept_capacity = 0;

static int keep_fd(int fd) {
  for (size_t i = 0; i < kept_count; i++)
    if (kept_fds[i] == fd) return 0;
  if (kept_count == kept_capacity) {
    size_t capacity = kept_capacity ? kept_capacity * 2 : 8;
    int *grown = realloc(kept_fds, capacity * sizeof *grown);
    if (!grown) return -ENOMEM;
    kept_fds = grown;
    kept_capacity = capacity;
  }
  kept_fds[kept_count++] = fd;
  return 0;
}

static int is_kept(int fd) {
  if (fd <= 2) return 1;
  for (size_t i = 0; i < kept_count; i++)
    if (kept_fds[i] == fd) return 1;
  return 0;
}

static napi_value clear_cloexec(napi_env env, napi_callback_info info) {
  int32_t fd;
  if (!int_argument(env, info, "clearCloexec(fd) takes one fd, a non-negative integer", &fd)) return NULL;
  int flags = fcntl(fd, F_GETFD);
  if (flags < 0 || fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC) != 0) return int_result(env, -errno);
  int kept = keep_fd(fd);
  return int_result(env, kept);
}

/* Sets close-on-exec on an fd another library opened without it (node-pty's PTY master). */
static napi_value set_cloexec(napi_env env, napi_callback_info info) {
  int32_t fd;
  if (!int_argument(env, info, "setCloexec(fd) takes one fd, a non-negative integer", &fd)) return NULL;
  int flags = fcntl(fd, F_GETFD);
  if (flags < 0 || fcntl(fd, F_SETFD, flags | FD_CLOEXEC) != 0) return int_result(env, -errno);
  return int_result(env, 0);
}

/* The UTF-8 bytes of a string argument, NUL-terminated and checked to hold no NUL of their own. */
static char *c_string(napi_env env, napi_value value, const char *what) {
  napi_valuetype type;
  size_t length;
  if (napi_typeof(env, value, &type) != napi_ok || type != napi_string ||
      napi_get_value_string_utf8(env, value, NULL, 0, &length) != napi_ok) {
    type_error(env, what);
    return NULL;
  }
  char *text = malloc(length + 1);
  if (!text) {
    napi_throw_error(env, "ENOMEM", "out of memory");
    return NULL;
  }
  size_t copied;
  if (napi_get_value_string_utf8(env, value, text, length + 1, &copied) != napi_ok || copied != length) {
    free(text);
    type_error(env, what);
    return NULL;
  }
  if (strlen(text) != length) {
    free(text);
    char message[160];
    snprintf(message, sizeof message, "%s must not contain NUL bytes", what);
    type_error(env, message);
    return NULL;
  }
  return text;
}

static void free_strings(char **strings) {
  if (!strings) return;
  for (char **s = strings; *s; s++) free(*s);
  free(strings);
}

/* A NULL-terminated char*[] from an array of strings; NULL (with an exception pending) when one is bad. */
static char **c_strings(napi_env env, napi_value value, const char *what, int at_least_one) {
  bool is_array;
  uint32_t count;
  if (napi_is_array(env, value, &is_array) != napi_ok || !is_array || napi_get_array_length(env, value, &count) != napi_ok ||
      (at_least_one && count == 0)) {
    char message[160];
    snprintf(message, sizeof message, "%s must be an array of strings%s", what, at_least_one ? " (at least one)" : "");
    type_error(env, message);
    return NULL;
  }
  char **strings = calloc((size_t)count + 1, sizeof *strings);
  if (!strings) {
    napi_throw_error(env, "ENOMEM", "out of memory");
    return NULL;
  }
  for (uint32_t i = 0; i < count; i++) {
    napi_value element;
    if (napi_get_element(env, value, i, &element) != napi_ok || !(strings[i] = c_string(env, element, what))) {
      if (!strings[i]) {
        bool pending = false;
        napi_is_exception_pending(env, &pending);
        if (!pending) type_error(env, what);
      }
      free_strings(strings);
      return NULL;
    }
  }
  return strings;
}

/*
 * Everything execve changes before it calls the kernel, so that a failed execve gives the process back as
 * it was: the fds it marked close-on-exec, the signal dispositions it reset, the signal mask.
 */
typedef struct {
  int *marked;
  size_t marked_count;
  int stdio_cleared[3];
  int reset[NSIG];
  sigset_t mask;
} ExecState;

/* The open fds above 2, from /proc/self/fd (/dev/fd on macOS), else every number up to the fd limit. */
static int *open_fds(size_t *count) {
  size_t capacity = 64, n = 0;
  int *fds = malloc(capacity * sizeof *fds);
  if (!fds) return NULL;
#ifdef __linux__
  DIR *dir = opendir("/proc/self/fd");
#else
  DIR *dir = opendir("/dev/fd");
#endif
  if (dir) {
    int own = dirfd(dir);
    struct dirent *entry;
    while ((entry = readdir(dir))) {
      char *end;
      long fd = strtol(entry->d_name, &end, 10);
      if (*end != '\0' || end == entry->d_name || fd <= 2 || fd == own || fd > INT32_MAX) continue;
      if (n == capacity) {
        int *grown = realloc(fds, (capacity *= 2) * sizeof *grown);
        if (!grown) {
          closedir(dir);
          free(fds);
          return NULL;
        }
        fds = grown;
      }
      fds[n++] = (int)fd;
    }
    closedir(dir);
  } else {
    struct rlimit limit;
    long max = getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY ? (long)limit.rlim_cur : 65536;
    if (max > 1 << 20) max = 1 << 20;
    for (long fd = 3; fd < max; fd++) {
      if (fcntl((int)fd, F_GETFD) < 0) continue;
      if (n == capacity) {
        int *grown = realloc(fds, (capacity *= 2) * sizeof *grown);
        if (!grown) {
          free(fds);
          return NULL;
        }
        fds = grown;
      }
      fds[n++] = (int)fd;
    }
  }
  *count = n;
  return fds;
}

/*
 * Every fd above 2 that the caller did not keep becomes close-on-exec, and 0-2 lose it (Node opens its
 * stdio close-on-exec; libuv clears it on a child's stdio the same way). Each change is remembered, to undo.
 */
static int mark_unkept_cloexec(ExecState *state) {
  size_t count = 0;
  int *fds = open_fds(&count);
  if (!fds) return -ENOMEM;
  for (int fd = 0; fd <= 2; fd++) {
    int flags = fcntl(fd, F_GETFD);
    state->stdio_cleared[fd] = flags >= 0 && (flags & FD_CLOEXEC) && fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC) == 0;
  }
  state->marked = fds;
  state->marked_count = 0;
  for (size_t i = 0; i < count; i++) {
    int flags = fcntl(fds[i], F_GETFD);
    if (flags < 0 || (flags & FD_CLOEXEC) || is_kept(fds[i])) continue;
    if (fcntl(fds[i], F_SETFD, flags | FD_CLOEXEC) == 0) fds[state->marked_count++] = fds[i];
  }
  return 0;
}

/*
 * The signal state a child_process child starts with (libuv's): no signal ignored, none blocked. Handlers
 * are reset by the kernel anyway; ignored signals would stay ignored across execve, and Node ignores
 * SIGPIPE (a program writing to a closed pipe would get EPIPE instead of dying, unlike under a shell).
 */
static void reset_signals(ExecState *state) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &state->mask);
  struct sigaction ignored, deflt;
  memset(&deflt, 0, sizeof deflt);
  deflt.sa_handler = SIG_DFL;
  sigemptyset(&deflt.sa_mask);
  for (int sig = 1; sig < NSIG; sig++) {
    state->reset[sig] = 0;
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    if (sigaction(sig, NULL, &ignored) != 0 || ignored.sa_handler != SIG_IGN) continue;
    if (sigaction(sig, &deflt, NULL) == 0) state->reset[sig] = 1;
  }
  sigset_t none;
  sigemptyset(&none);
  pthread_sigmask(SIG_SETMASK, &none, NULL);
}

static void restore(ExecState *state) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, NULL);
  struct sigaction ignore;
  memset(&ignore, 0, sizeof ignore);
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  for (int sig = 1; sig < NSIG; sig++)
    if (state->reset[sig]) sigaction(sig, &ignore, NULL);
  pthread_sigmask(SIG_SETMASK, &state->mask, NULL);
  for (size_t i = 0; i < state->marked_count; i++) {
    int flags = fcntl(state->marked[i], F_GETFD);
    if (flags >= 0) fcntl(state->marked[i], F_SETFD, flags & ~FD_CLOEXEC);
  }
  for (int fd = 0; fd <= 2; fd++) {
    int flags = fcntl(fd, F_GETFD);
    if (state->stdio_cleared[fd] && flags >= 0) fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
  free(state->marked);
}

static napi_value exec_program(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value args[3];
  if (napi_get_cb_info(env, info, &argc, args, NULL, NULL) != napi_ok || argc != 3) {
    return type_error(env, "execve(file, argv, env) takes three arguments");
  }
  char *file = c_string(env, args[0], "execve's file");
  if (!file) return NULL;
  char **argv = c_strings(env, args[1], "execve's argv", 1);
  if (!argv) {
    free(file);
    return NULL;
  }
  char **envp = c_strings(env, args[2], "execve's env", 0);
  if (!envp) {
    free(file);
    free_strings(argv);
    return NULL;
  }
  ExecState state;
  int error = mark_unkept_cloexec(&state);
  if (error == 0) {
    reset_signals(&state);
    execve(file, argv, envp);
    error = -errno;
    restore(&state);
  }
  free(file);
  free_strings(argv);
  free_strings(envp);
  return int_result(env, error);
}

static napi_value set_child_subreaper(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  bool on = true;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc > 1 ||
      (argc == 1 && napi_get_value_bool(env, argv[0], &on) != napi_ok)) {
    return type_error(env, "setChildSubreaper(on?) takes at most one boolean");
  }
#if defined(__linux__) && defined(PR_SET_CHILD_SUBREAPER)
  if (prctl(PR_SET_CHILD_SUBREAPER, on ? 1 : 0, 0, 0, 0) == 0) return int_result(env, on ? 1 : 0);
  return int_result(env, errno == EINVAL ? 0 : -errno);
#else
  (void)on;
  return int_result(env, 0);
#endif
}

static napi_value is_child_subreaper(napi_env env, napi_callback_info info) {
  (void)info;
#if defined(__linux__) && defined(PR_GET_CHILD_SUBREAPER)
  int value = 0;
  if (prctl(PR_GET_CHILD_SUBREAPER, &value, 0, 0, 0) != 0) value = 0;
  return bool_result(env, value);
#else
  return bool_result(env, 0);
#endif
}

static napi_value set_dumpable(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  bool dumpable;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 1 ||
      napi_get_value_bool(env, argv[0], &dumpable) != napi_ok) {
    return type_error(env, "setDumpable(dumpable) takes one boolean");
  }
#ifdef __linux__
  if (prctl(PR_SET_DUMPABLE, dumpable ? 1 : 0, 0, 0, 0) != 0) return int_result(env, -errno);
#endif
  return int_result(env, 0);
}

static napi_value is_dumpable(napi_env env, napi_callback_info info) {
  (void)info;
#ifdef __linux__
  return bool_result(env, prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 1);
#else
  return bool_result(env, 1);
#endif
}

static napi_value reap_child(napi_env env, napi_callback_info info) {
  int32_t pid;
  if (!int_argument(env, info, "reapChild(pid) takes one pid, a positive integer", &pid)) return NULL;
  if (pid == 0) return type_error(env, "reapChild(pid) takes one pid, a positive integer");
  int status;
  pid_t done;
  do {
    done = waitpid(pid, &status, WNOHANG);
  } while (done < 0 && errno == EINTR);
  if (done < 0) return int_result(env, -errno);
  return int_result(env, done == pid ? 1 : 0);
}

/*
 * Every open fd above `above` gets FD_CLOEXEC; nothing is closed. The walk over /proc/self/fd (open_fds)
 * counts the fds that lacked the flag (the inherited ones: Node and libuv open theirs close-on-exec);
 * then, where the kernel has it (Linux >= 5.11), close_range(above + 1, ~0U, CLOSE_RANGE_CLOEXEC) sweeps
 * the whole range again in one call, which also covers an fd opened by another thread after the walk.
 */
static napi_value set_cloexec_above(napi_env env, napi_callback_info info) {
  int32_t above;
  if (!int_argument(env, info, "setCloexecAbove(fd) takes one fd, a non-negative integer", &above)) return NULL;
  size_t count = 0;
  int *fds = open_fds(&count);
  if (!fds) return int_result(env, -ENOMEM);
  int32_t changed = 0, error = 0;
  for (size_t i = 0; i < count; i++) {
    if (fds[i] <= above) continue;
    int flags = fcntl(fds[i], F_GETFD);
    if (flags < 0 || (flags & FD_CLOEXEC)) continue; /* closed meanwhile, or already so */
    if (fcntl(fds[i], F_SETFD, flags | FD_CLOEXEC) == 0) changed++;
    else if (errno != EBADF) error = -errno;
  }
  free(fds);
#if defined(__linux__) && defined(SYS_close_range)
  if (above < INT32_MAX) syscall(SYS_close_range, (unsigned int)above + 1, ~0U, CLOSE_RANGE_CLOEXEC);
#endif
  return int_result(env, error ? error : changed);
}

/*
 * Raises a pipe's capacity (Linux: 64 KiB by default) to at least `bytes`; never lowers it. Over the user's
 * limits (pipe-max-size, pipe-user-pages-*) the kernel refuses with EPERM: the pipe keeps its capacity, which
 * is returned, as a pipe that could not grow still works.
 */
static napi_value grow_pipe(napi_env env, napi_callback_info info) {
  int32_t fd, bytes;
  if (!two_int_arguments(env, info, "growPipe(fd, bytes) takes an fd and a byte count, non-negative integers", &fd,
                         &bytes)) {
    return NULL;
  }
#if defined(__linux__) && defined(F_SETPIPE_SZ) && defined(F_GETPIPE_SZ)
  struct stat info_;
  if (fstat(fd, &info_) != 0) return int_result(env, -errno);
  if (!S_ISFIFO(info_.st_mode)) return int_result(env, 0);
  int current = fcntl(fd, F_GETPIPE_SZ);
  if (current < 0) return int_result(env, -errno);
  if (current >= bytes) return int_result(env, current);
  int grown = fcntl(fd, F_SETPIPE_SZ, bytes);
  if (grown >= 0) return int_result(env, grown);
  return int_result(env, errno == EPERM ? current : -errno);
#else
  (void)fd;
  (void)bytes;
  return int_result(env, 0);
#endif
}

/*
 * Descriptor passing (SCM_RIGHTS): how a helper that opened a file inside a sandbox hands the open file back,
 * so that its parent never opens the path itself (a path can be swapped between two opens; a descriptor
 * cannot). The pair is close-on-exec, set atomically where the system can (as pipes are); the child's end is
 * handed over through a child's stdio array, which dup2s it into place without the flag.
 */
static napi_value socket_pair(napi_env env, napi_callback_info info) {
  (void)info;
  int fds[2];
#ifdef SOCK_CLOEXEC
  int made = socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds);
#else
  int made = socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
  if (made == 0 && (fcntl(fds[0], F_SETFD, FD_CLOEXEC) != 0 || fcntl(fds[1], F_SETFD, FD_CLOEXEC) != 0)) {
    int saved = errno;
    close(fds[0]);
    close(fds[1]);
    errno = saved;
    made = -1;
  }
#endif
  if (made != 0) return int_result(env, -errno);
  return fd_pair_result(env, fds);
}

static napi_value send_fd(napi_env env, napi_callback_info info) {
  int32_t sock, fd;
  if (!two_int_arguments(env, info, "sendFd(socket, fd) takes two fds, non-negative integers", &sock, &fd)) return NULL;
  char byte = 0;
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  union {
    struct cmsghdr header;
    char space[CMSG_SPACE(sizeof(int))];
  } control;
  memset(&control, 0, sizeof control);
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space, .msg_controllen = sizeof control.space};
  struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cmsg), &fd, sizeof fd);
#ifdef MSG_NOSIGNAL
  int flags = MSG_NOSIGNAL;
#else
  int flags = 0;
#endif
  ssize_t sent;
  do sent = sendmsg(sock, &msg, flags);
  while (sent < 0 && errno == EINTR);
  if (sent < 0) return int_result(env, -errno);
  return int_result(env, sent == 1 ? 0 : -EIO);
}

static napi_value receive_fd(napi_env env, napi_callback_info info) {
  int32_t sock;
  if (!int_argument(env, info, "receiveFd(socket) takes one fd, a non-negative integer", &sock)) return NULL;
  char byte;
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  /* Room for a few: a peer that sends more than one gets none accepted, and none leaks. */
  union {
    struct cmsghdr header;
    char space[CMSG_SPACE(sizeof(int) * 8)];
  } control;
  memset(&control, 0, sizeof control);
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space, .msg_controllen = sizeof control.space};
  int flags = MSG_DONTWAIT;
#ifdef MSG_CMSG_CLOEXEC
  flags |= MSG_CMSG_CLOEXEC;
#endif
  ssize_t got;
  do got = recvmsg(sock, &msg, flags);
  while (got < 0 && errno == EINTR);
  if (got < 0) return int_result(env, -errno);
  int received = -1, count = 0;
  for (struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg); cmsg; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
    if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof fd);
      if (count++ == 0) received = fd;
      else close(fd);
    }
  }
  if (count > 1 || (msg.msg_flags & MSG_CTRUNC)) {
    if (received >= 0) close(received);
    return int_result(env, -EBADMSG);
  }
  if (received < 0) return int_result(env, -ENODATA);
#ifndef MSG_CMSG_CLOEXEC
  fcntl(received, F_SETFD, FD_CLOEXEC);
#endif
  return int_result(env, received);
}

/* SO_PEERCRED of the AF_UNIX socket argument: its peer's pid, or its uid; -errno, -ENOSYS off Linux. */
static napi_value peer_credential(napi_env env, napi_callback_info info, const char *usage, int uid) {
  int32_t sock;
  if (!int_argument(env, info, usage, &sock)) return NULL;
#ifdef SO_PEERCRED
  struct ucred cred;
  socklen_t length = sizeof cred;
  if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) return int_result(env, -errno);
  if (length != sizeof cred || cred.pid <= 0) return int_result(env, -ENODATA);
  return int_result(env, uid ? (int32_t)cred.uid : cred.pid);
#else
  (void)uid;
  return int_result(env, -ENOSYS);
#endif
}

/*
 * Who is at the other end of a socket pair (SO_PEERCRED): a sandbox's helper makes a pair and sends one end,
 * so that its parent learns the helper's pid as its own PID namespace numbers it (the helper, in a namespace of
 * its own, cannot say it).
 */
static napi_value peer_pid(napi_env env, napi_callback_info info) {
  return peer_credential(env, info, "peerPid(socket) takes one fd, a non-negative integer", 0);
}

/*
 * A unix socket path as a sockaddr_un; 0 when it does not fit sun_path (or holds NUL: C would cut it there) or
 * is not a string, after throwing a TypeError.
 */
static int unix_address(napi_env env, napi_callback_info info, const char *usage, struct sockaddr_un *address) {
  size_t argc = 1;
  napi_value argv[1];
  napi_valuetype type;
  size_t length = 0;
  memset(address, 0, sizeof *address);
  address->sun_family = AF_UNIX;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 1 ||
      napi_typeof(env, argv[0], &type) != napi_ok || type != napi_string ||
      napi_get_value_string_utf8(env, argv[0], NULL, 0, &length) != napi_ok || length == 0 ||
      length >= sizeof address->sun_path ||
      napi_get_value_string_utf8(env, argv[0], address->sun_path, sizeof address->sun_path, &length) != napi_ok ||
      strlen(address->sun_path) != length) {
    type_error(env, usage);
    return 0;
  }
  return 1;
}

static int unix_socket(int nonblocking) {
  int type = SOCK_STREAM;
#ifdef SOCK_CLOEXEC
  type |= SOCK_CLOEXEC;
  if (nonblocking) type |= SOCK_NONBLOCK;
  return socket(AF_UNIX, type, 0);
#else
  int fd = socket(AF_UNIX, type, 0);
  if (fd >= 0) {
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    if (nonblocking) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  return fd;
#endif
}

/*
 * A unix socket at the path argument: bound and listening on it (the caller removes a stale socket first and
 * sets its mode after), or connected to it without waiting for room in its backlog (-EAGAIN), then blocking.
 */
static napi_value unix_endpoint(napi_env env, napi_callback_info info, const char *usage, int listening) {
  struct sockaddr_un address;
  if (!unix_address(env, info, usage, &address)) return NULL;
  int fd = unix_socket(!listening);
  if (fd < 0) return int_result(env, -errno);
  int failed;
  if (listening) {
    failed = bind(fd, (struct sockaddr *)&address, sizeof address) != 0 || listen(fd, 16) != 0;
  } else {
    int made;
    do made = connect(fd, (struct sockaddr *)&address, sizeof address);
    while (made != 0 && errno == EINTR);
    failed = made != 0 || fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0;
  }
  if (failed) {
    int saved = errno;
    close(fd);
    return int_result(env, -saved);
  }
  return int_result(env, fd);
}

static napi_value listen_unix(napi_env env, napi_callback_info info) {
  return unix_endpoint(env, info, "listenUnix(path) takes a path string shorter than sun_path, without NUL", 1);
}

static napi_value connect_unix(napi_env env, napi_callback_info info) {
  return unix_endpoint(env, info, "connectUnix(path) takes a path string shorter than sun_path, without NUL", 0);
}

/*
 * Waits for a connection on `listener` and accepts it; gives up with -ECANCELED as soon as `watch` (a pipe from
 * whoever started this process) is readable or hung up, so a process waiting here ends with its parent.
 */
static napi_value accept_unix(napi_env env, napi_callback_info info) {
  int32_t listener, watch;
  if (!two_int_arguments(env, info, "acceptUnix(listener, watch) takes two fds, non-negative integers", &listener,
                         &watch))
    return NULL;
  for (;;) {
    struct pollfd fds[2] = {{.fd = listener, .events = POLLIN}, {.fd = watch, .events = POLLIN}};
    int ready = poll(fds, 2, -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return int_result(env, -errno);
    }
    if (fds[1].revents) return int_result(env, -ECANCELED);
    if (fds[0].revents & (POLLERR | POLLNVAL)) return int_result(env, -EBADF);
    if (!(fds[0].revents & POLLIN)) continue;
#ifdef SOCK_CLOEXEC
    int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
#else
    int fd = accept(listener, NULL, NULL);
    if (fd >= 0) fcntl(fd, F_SETFD, FD_CLOEXEC);
#endif
    if (fd >= 0) return int_result(env, fd);
    if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
    return int_result(env, -errno);
  }
}

static napi_value wait_readable(napi_env env, napi_callback_info info) {
  int32_t fd, ms;
  if (!two_int_arguments(env, info, "waitReadable(fd, ms) takes an fd and milliseconds, non-negative integers", &fd,
                         &ms))
    return NULL;
  struct pollfd one = {.fd = fd, .events = POLLIN};
  int ready;
  do ready = poll(&one, 1, ms);
  while (ready < 0 && errno == EINTR);
  if (ready < 0) return int_result(env, -errno);
  if (ready == 1 && (one.revents & POLLNVAL)) return int_result(env, -EBADF);
  return int_result(env, ready);
}

/* Whose process is at the other end of a unix socket: a warm harness process serves its own user only. */
static napi_value peer_uid(napi_env env, napi_callback_info info) {
  return peer_credential(env, info, "peerUid(socket) takes one fd, a non-negative integer", 1);
}

static napi_value dup_to(napi_env env, napi_callback_info info) {
  int32_t fd, target;
  if (!two_int_arguments(env, info, "dup2(fd, target) takes two fds, non-negative integers", &fd, &target))
    return NULL;
  int made;
  do made = dup2(fd, target);
  while (made < 0 && errno == EINTR);
  return int_result(env, made < 0 ? -errno : 0);
}

/*
 * _exit: no atexit handlers, no V8 or libuv teardown (joining V8's worker threads and unmapping its heap took
 * a harness whose warm process ran its command 5-10 ms after it had nothing left to do). Nothing buffered in
 * this process is written: the caller has nothing left to write.
 */
static napi_value exit_now(napi_env env, napi_callback_info info) {
  int32_t status;
  if (!int_argument(env, info, "exitNow(status) takes one exit status, 0-255", &status)) return NULL;
  _exit(status & 0xff);
}

/*
 * Where a connection the netfilter NAT redirected to this listener was headed (the sandbox's transparent TCP):
 * SO_ORIGINAL_DST for an IPv4 socket, IP6T_SO_ORIGINAL_DST (the same number at SOL_IPV6) for an IPv6 one.
 */
static napi_value original_destination(napi_env env, napi_callback_info info) {
  int32_t fd;
  if (!int_argument(env, info, "originalDestination(fd) takes one fd, a non-negative integer", &fd)) return NULL;
#ifdef __linux__
  struct sockaddr_storage local;
  socklen_t length = sizeof local;
  if (getsockname(fd, (struct sockaddr *)&local, &length) != 0) return int_result(env, -errno);
  struct sockaddr_storage original;
  memset(&original, 0, sizeof original);
  length = sizeof original;
  /* SO_ORIGINAL_DST and IP6T_SO_ORIGINAL_DST are both 80 (linux/netfilter_ipv4.h, netfilter_ipv6/ip6_tables.h). */
  int level = local.ss_family == AF_INET6 ? SOL_IPV6 : SOL_IP;
  if (local.ss_family != AF_INET && local.ss_family != AF_INET6) return int_result(env, -EAFNOSUPPORT);
  if (getsockopt(fd, level, 80, &original, &length) != 0) return int_result(env, -errno);
  char text[INET6_ADDRSTRLEN];
  int port;
  if (original.ss_family == AF_INET) {
    struct sockaddr_in *v4 = (struct sockaddr_in *)&original;
    if (!inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text)) return int_result(env, -errno);
    port = ntohs(v4->sin_port);
  } else if (original.ss_family == AF_INET6) {
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&original;
    if (!inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text)) return int_result(env, -errno);
    port = ntohs(v6->sin6_port);
  } else {
    return int_result(env, -EAFNOSUPPORT);
  }
  napi_value result, address, number;
  if (napi_create_array_with_length(env, 2, &result) != napi_ok ||
      napi_create_string_utf8(env, text, NAPI_AUTO_LENGTH, &address) != napi_ok ||
      napi_create_int32(env, port, &number) != napi_ok || napi_set_element(env, result, 0, address) != napi_ok ||
      napi_set_element(env, result, 1, number) != napi_ok)
    return NULL;
  return result;
#else
  return int_result(env, -ENOSYS);
#endif
}

NAPI_MODULE_INIT() {
  napi_property_descriptor methods[] = {
      {"pipe", NULL, new_pipe, NULL, NULL, NULL, napi_default, NULL},
      {"clearCloexec", NULL, clear_cloexec, NULL, NULL, NULL, napi_default, NULL},
      {"setCloexec", NULL, set_cloexec, NULL, NULL, NULL, napi_default, NULL},
      {"execve", NULL, exec_program, NULL, NULL, NULL, napi_default, NULL},
      {"setChildSubreaper", NULL, set_child_subreaper, NULL, NULL, NULL, napi_default, NULL},
      {"isChildSubreaper", NULL, is_child_subreaper, NULL, NULL, NULL, napi_default, NULL},
      {"setDumpable", NULL, set_dumpable, NULL, NULL, NULL, napi_default, NULL},
      {"isDumpable", NULL, is_dumpable, NULL, NULL, NULL, napi_default, NULL},
      {"reapChild", NULL, reap_child, NULL, NULL, NULL, napi_default, NULL},
      {"setCloexecAbove", NULL, set_cloexec_above, NULL, NULL, NULL, napi_default, NULL},
      {"growPipe", NULL, grow_pipe, NULL, NULL, NULL, napi_default, NULL},
      {"socketPair", NULL, socket_pair, NULL, NULL, NULL, napi_default, NULL},
      {"sendFd", NULL, send_fd, NULL, NULL, NULL, napi_default, NULL},
      {"receiveFd", NULL, receive_fd, NULL, NULL, NULL, napi_default, NULL},
      {"peerPid", NULL, peer_pid, NULL, NULL, NULL, napi_default, NULL},
      {"originalDestination", NULL, original_destination, NULL, NULL, NULL, napi_default, NULL},
      {"listenUnix", NULL, listen_unix, NULL, NULL, NULL, napi_default, NULL},
      {"acceptUnix", NULL, accept_unix, NULL, NULL, NULL, napi_default, NULL},
      {"connectUnix", NULL, connect_unix, NULL, NULL, NULL, napi_default, NULL},
      {"waitReadable", NULL, wait_readable, NULL, NULL, NULL, napi_default, NULL},
      {"peerUid", NULL, peer_uid, NULL, NULL, NULL, napi_default, NULL},
      {"dup2", NULL, dup_to, NULL, NULL, NULL, napi_default, NULL},
      {"exitNow", NULL, exit_now, NULL, NULL, NULL, napi_default, NULL},
  };
  if (napi_define_properties(env, exports, sizeof methods / sizeof methods[0], methods) != napi_ok) return NULL;
  return exports;
}
