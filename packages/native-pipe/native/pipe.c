/*
 * An anonymous pipe for Node, which has none: libuv makes a child's stdio "pipes" as socketpairs, and a
 * socket cannot be opened through /dev/stdout, /dev/stderr or /proc/self/fd/N (ENXIO), which a pipe can.
 *
 *   pipe() -> [readFd, writeFd]   both ends close-on-exec and blocking
 *          -> -errno              when the pipe cannot be made (EMFILE, ENFILE)
 *
 * Close-on-exec is set atomically (pipe2): a child spawned by another thread between the pipe's creation
 * and a separate fcntl would otherwise keep an end open, and a write end held by a stranger means the
 * reader never sees EOF. Blocking, because the child's ends are meant to be handed over as they are;
 * libuv makes the parent's ends non-blocking itself when it opens them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <node_api.h>

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

static napi_value new_pipe(napi_env env, napi_callback_info info) {
  (void)info;
  int fds[2];
  napi_value result;
  if (make_pipe(fds) != 0) {
    if (napi_create_int32(env, -errno, &result) != napi_ok) return NULL;
    return result;
  }
  napi_value read_end, write_end;
  if (napi_create_array_with_length(env, 2, &result) != napi_ok || napi_create_int32(env, fds[0], &read_end) != napi_ok ||
      napi_create_int32(env, fds[1], &write_end) != napi_ok || napi_set_element(env, result, 0, read_end) != napi_ok ||
      napi_set_element(env, result, 1, write_end) != napi_ok) {
    /* Nobody would ever learn these numbers: close them rather than leak them. */
    close(fds[0]);
    close(fds[1]);
    return NULL;
  }
  return result;
}

NAPI_MODULE_INIT() {
  napi_property_descriptor methods[] = {
      {"pipe", NULL, new_pipe, NULL, NULL, NULL, napi_default, NULL},
  };
  if (napi_define_properties(env, exports, sizeof methods / sizeof methods[0], methods) != napi_ok) return NULL;
  return exports;
}
