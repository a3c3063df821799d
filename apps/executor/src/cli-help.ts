import { API_KEY_ENV, API_KEY_FILE_ENV, CODEX_API_KEY_ENV, DEPRECATED_API_KEY_ENV } from './api-key.js';
import { DUMPABLE_ENV } from './process-guards.js';

/** The executor's help: the line above the flags and the text after them (examples, the key, endpoints). */

export const EXECUTOR_DESCRIPTION =
  'Tether executor: serves the Codex exec-server protocol (run and control processes) over stdio or WebSocket.';

export const EXECUTOR_HELP = `
Examples:
  executor                                  serve on ws://127.0.0.1:<free port>
  executor --listen 127.0.0.1:8765          serve on a fixed port (or ws://127.0.0.1:8765)
  executor --listen stdio                   one client over stdin/stdout (exits when stdin closes)
  executor --registry https://registry.example --environment-id dev-1 --api-key-file ~/.tether/executor.key
                                            register and serve harnesses through the relay
  ${API_KEY_ENV}=… executor --registry http://127.0.0.1:8080 --environment-id dev-1
                                            the same with the key in the environment: the executor
                                            re-executes itself without it and reads it from a pipe

API key: no child process can read it from the executor's environment. A key in ${API_KEY_ENV} or
${CODEX_API_KEY_ENV} is moved out of it by re-executing (same pid) with the key on a pipe (--api-key-fd); where
that is impossible (no execve: Node < 22.15 without the native addon) the executor refuses to start
unless --allow-api-key-env. In remote mode the executor also marks itself non-dumpable
(prctl PR_SET_DUMPABLE 0), so children of the same user cannot read its memory or /proc/<pid>/environ;
root children still can. ${DUMPABLE_ENV}=1 keeps it dumpable (for a debugger).

Endpoints (WebSocket mode): / (WebSocket upgrade), GET /readyz, GET /livez. Requests carrying an Origin
header are refused with 403. Logs go to stderr: pretty on a terminal, else JSON (--log-format); level from
--log-level, else [logging] level.

Proxies: registry calls, the relay socket, http/request and OTLP export go through HTTPS_PROXY /
HTTP_PROXY / ALL_PROXY (lower-case too), except hosts in NO_PROXY, as Codex's do; loopback is not exempt.

Deprecated, still read for one more release (a warning names the replacement): ${DEPRECATED_API_KEY_ENV} and
${API_KEY_FILE_ENV} (the harness reads them too: use ${API_KEY_ENV} and --api-key-file), TETHER_EXECUTOR_REMOTE,
TETHER_LOG and TETHER_LOG_FORMAT.`;
