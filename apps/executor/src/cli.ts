import { isLoopbackHost } from '@tether/exec-protocol';
import { RpcConnection } from '@tether/jsonrpc';
import { generateIdentity, SUITE_HYBRID_AESGCM, SUITE_HYBRID_CHACHAPOLY } from '@tether/noise';
import { ProxyConfigError, type ProxySettings, proxySettingsFromEnv } from '@tether/outbound';
import { Telemetry } from '@tether/telemetry';
import {
  Deprecations,
  type EnvScheme,
  LOG_FORMAT_ALIAS,
  type LogFormat,
  type LogLevel,
  logOptions,
  packageVersion,
  SchemeCommand,
} from '@tether/telemetry/cli';
import { type Command, InvalidArgumentError } from 'commander';
import {
  API_KEY_ENV,
  API_KEY_ENV_VARS,
  API_KEY_FILE_ENV,
  ApiKeyError,
  type ApiKeySource,
  apiKeyVariablesIn,
  CODEX_API_KEY_ENV,
  chooseApiKeySource,
  DEPRECATED_API_KEY_ENV,
  readApiKey,
} from './api-key.js';
import { ConfigError, defaultConfigPath, type ExecutorConfig, loadConfig } from './config.js';
import { EXECUTOR_VERSION } from './environment-info.js';
import {
  canHandOver,
  currentCommandLine,
  type ExecSupport,
  handOverApiKey,
  handoverUnavailableReason,
  KEY_ORIGIN_ENV,
  platformExecSupport,
  type Reexec,
} from './key-handover.js';
import { DEFAULT_LISTEN_URL, type ListenTarget, ListenUrlError, parseListenUrl } from './listen-url.js';
import { createLogger, type Logger } from './logger.js';
import { ExecutorMetrics, executorTelemetryOptions } from './metrics.js';
import { checkEnvironmentId, parseRegistryUrl, RegistryError } from './remote/registry-client.js';
import { isKeyRefusal, RemoteLink } from './remote/remote-link.js';
import { ExecServer } from './server.js';
import { ForwardPolicy, ForwardPolicyError } from './tcp/policy.js';

/** Set to `1` to leave the executor dumpable (debuggers, core dumps); by default remote mode is not. */
export const DUMPABLE_ENV = 'TETHER_EXECUTOR_DUMPABLE';

/** Set to `true` (or `1`) to shut a remote executor down when its stdin closes; stripped from children. */
export const EXIT_ON_STDIN_CLOSE_ENV = ['TETHER_EXECUTOR_EXIT_ON_STDIN_CLOSE', 'CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE'];

/**
 * The executor's flags and their variables (`TETHER_EXECUTOR_<FLAG>`; README "Flags and variables").
 * `--remote` is Codex's spelling of `--registry` (`codex exec-server --remote URL`) and stays. The key's
 * variables and the stdin switch's Codex name are read where the key is chosen, since they mean something
 * only with --registry and are ignored without it.
 */
export const EXECUTOR_ENV: EnvScheme = {
  app: 'executor',
  flagAliases: { '--remote': '--registry' },
  deprecatedVariables: {
    '--registry': ['TETHER_EXECUTOR_REMOTE'],
    '--log-level': ['TETHER_LOG'],
    '--log-format': [LOG_FORMAT_ALIAS],
  },
  deprecatedReadByApp: { '--api-key-file': [API_KEY_FILE_ENV] },
  alsoReadByApp: { '--exit-on-stdin-close': EXIT_ON_STDIN_CLOSE_ENV.slice(1) },
  variables: [
    {
      name: API_KEY_ENV,
      what: 'the API key itself, with --registry; moved out of the environment at start',
      commands: ['(program)'],
      secret: true,
      also: [CODEX_API_KEY_ENV],
      deprecated: [DEPRECATED_API_KEY_ENV],
    },
  ],
};

/** Variables naming the key's file or descriptor, never passed to a child (beside the key's own). */
const KEY_SOURCE_ENV = ['TETHER_EXECUTOR_API_KEY_FILE', 'TETHER_EXECUTOR_API_KEY_FD', KEY_ORIGIN_ENV];

/** Why each deprecated key variable is: the harness reads the same name as its own. */
const SHARED_WITH_HARNESS = 'the harness reads it too, as its own';

export interface CliIo {
  stdin: NodeJS.ReadableStream & import('node:stream').Readable;
  stdout: NodeJS.WritableStream & import('node:stream').Writable;
  stderr: NodeJS.WritableStream;
  env: NodeJS.ProcessEnv;
}

function descriptor(value: string): number {
  const parsed = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(parsed) || parsed < 3) {
    throw new InvalidArgumentError('expected a file descriptor number of 3 or more (0-2 are stdio)');
  }
  return parsed;
}

function positiveInteger(value: string): number {
  const parsed = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(parsed) || parsed < 1) {
    throw new InvalidArgumentError('expected a positive integer');
  }
  return parsed;
}

function forwardAllowEntry(value: string, previous: string[] | undefined): string[] {
  try {
    ForwardPolicy.parse([value]);
  } catch (err) {
    throw new InvalidArgumentError(err instanceof ForwardPolicyError ? err.problem : (err as Error).message);
  }
  return [...(previous ?? []), value];
}

/**
 * `--no-forward` and `--forward-allow` over the config file's `[forward]`. A flag is the more specific word:
 * `--forward-allow` beats the file's `enabled = false` as it beats its `allow`. Answers a usage problem or null.
 */
export function applyForwardFlags(
  config: Pick<ExecutorConfig, 'forwardEnabled' | 'forwardAllow'>,
  options: Pick<ExecutorOptions, 'forward' | 'forwardAllow'>,
): string | null {
  if (options.forward === false && options.forwardAllow !== undefined) {
    return '--forward-allow cannot be combined with --no-forward';
  }
  if (options.forward === false) config.forwardEnabled = false;
  if (options.forwardAllow !== undefined) {
    config.forwardEnabled = true;
    config.forwardAllow = options.forwardAllow;
  }
  return null;
}

function registryUrl(value: string): string {
  try {
    return parseRegistryUrl(value);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
}

function noiseCipher(value: string): 'aesgcm' | 'chachapoly' {
  if (value === 'aesgcm' || value === 'chachapoly') return value;
  throw new InvalidArgumentError('expected aesgcm or chachapoly');
}

function environmentId(value: string): string {
  try {
    checkEnvironmentId(value);
    return value;
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
}

function listenTarget(value: string): ListenTarget {
  try {
    return parseListenUrl(value);
  } catch (err) {
    if (err instanceof ListenUrlError) throw new InvalidArgumentError(err.message);
    throw err;
  }
}

export interface ExecutorOptions {
  listen?: ListenTarget;
  /** `--registry` (or Codex's `--remote`): remote mode. */
  registry?: string;
  environmentId?: string;
  noiseCipher?: 'aesgcm' | 'chachapoly';
  exitOnStdinClose?: boolean;
  concurrentRequests?: number;
  /** `--forward-allow` entries (replace the config's list); `forward: false` is `--no-forward`. */
  forwardAllow?: string[];
  forward?: boolean;
  maxDetachedProcesses?: number;
  config?: string;
  strictConfig: boolean;
  apiKeyFile?: string;
  apiKeyFd?: number;
  allowApiKeyEnv?: boolean;
  allowInsecureRegistry?: boolean;
  /** `--log-level`; default the config's `[logging] level`. */
  logLevel?: LogLevel;
  /** `--log-format`; default auto. */
  logFormat?: LogFormat;
  /**
   * The parse's deprecation lines, held: said once the executor no longer re-executes itself (so once a run).
   * Default: said at once on io.stderr.
   */
  deprecations?: Deprecations;
}

/** What runExecutor needs from the platform to re-execute itself (tests give stand-ins). */
export interface ExecutorPlatform {
  exec: ExecSupport;
  /** The command line to re-execute. */
  commandLine: () => Reexec;
}

export function buildCommand(
  run: (options: ExecutorOptions) => Promise<void>,
  env: NodeJS.ProcessEnv = process.env,
): Command {
  const command = new SchemeCommand('executor', EXECUTOR_ENV, { env });
  // Said by runExecutor after the key's handover, which re-executes the executor (and so parses again).
  command.deprecations.hold();
  command
    .description(
      'Tether executor: serves the Codex exec-server protocol (run and control processes) over stdio or WebSocket.',
    )
    .version(packageVersion(import.meta.url, '@tether/executor'))
    .option(
      '--listen <address>',
      `where to serve: ws://IP:PORT or IP:PORT (port 0 picks one; the bound URL is printed on stdout) or stdio (default: ${DEFAULT_LISTEN_URL}; with --registry: no local listener unless given)`,
      listenTarget,
    )
    .option(
      '--registry <url>',
      `remote mode: register with this Tether (or Codex-compatible) registry and serve harnesses through its relay (--remote URL, Codex's spelling, is the same flag); the API key comes from --api-key-file, --api-key-fd or ${API_KEY_ENV} (or Codex's ${CODEX_API_KEY_ENV})`,
      registryUrl,
    )
    .option(
      '--api-key-file <path>',
      'with --registry: read the API key from this file (a regular file, mode 0600 or stricter; one trailing newline is ignored)',
    )
    .option(
      '--api-key-fd <n>',
      'with --registry: read the API key from this inherited file descriptor until EOF, then close it',
      descriptor,
    )
    .option(
      '--allow-api-key-env',
      `with --registry: accept ${API_KEY_ENV}/${CODEX_API_KEY_ENV} even where the executor cannot re-execute itself without it (children can then read the key from /proc/<pid>/environ)`,
    )
    .option(
      '--allow-insecure-registry',
      'with --registry: allow an http:// registry on a host that is not loopback (the API key then travels in the clear)',
    )
    .option('--environment-id <id>', 'the environment this executor serves (required with --registry)', environmentId)
    .option(
      '--noise-cipher <cipher>',
      "with --registry: the records' cipher, aesgcm (Codex's, the default) or chachapoly (a Codex harness speaks only aesgcm)",
      noiseCipher,
    )
    .option(
      '--exit-on-stdin-close',
      `with --registry: shut down gracefully when stdin closes (for a parent that owns this process; Codex's ${EXIT_ON_STDIN_CLOSE_ENV[1]}=true too)`,
    )
    .option(
      '--concurrent-requests <n>',
      'requests handled at once per connection; 1 = strictly in order (default from config, else 1)',
      positiveInteger,
    )
    .option(
      '--max-detached-processes <n>',
      'detached processes (harness exec -d) kept at once, running or exited and not yet evicted (default from config, else 64)',
      positiveInteger,
    )
    .option(
      '--forward-allow <targets>',
      'targets `harness forward` may reach, comma-separated or repeated: any, loopback, IP, CIDR or host name, each with an optional :PORT or :LOW-HIGH ([IPv6]:PORT); replaces [forward] allow and turns forwarding on even where [forward] enabled = false (default: loopback)',
      forwardAllowEntry,
    )
    .option('--no-forward', 'refuse TCP forwarding (harness forward) and do not advertise it')
    .option('--config <path>', `TOML config file (default: ${defaultConfigPath()}, i.e. $TETHER_HOME/config.toml)`)
    .option('--strict-config', 'fail on unknown or invalid config keys instead of ignoring them', false);
  for (const option of logOptions(undefined)) command.addOption(option);
  return command
    .addHelpText(
      'after',
      `
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
TETHER_LOG and TETHER_LOG_FORMAT.`,
    )
    .action(async (options: ExecutorOptions, self: Command) => {
      // The stdin switch's variable means something only with --registry; without it, it was always ignored.
      if (self.getOptionValueSource('exitOnStdinClose') === 'env' && options.registry === undefined) {
        delete options.exitOnStdinClose;
      }
      return run({ ...options, deprecations: command.deprecations });
    });
}

/** Runs the executor until a signal or (stdio) EOF; returns the process exit code. */
/** Checks flag combinations that commander cannot express; returns an error message or null. */
function checkModes(options: ExecutorOptions): string | null {
  if (options.registry === undefined) {
    if (options.environmentId !== undefined) return '--environment-id needs --registry';
    if (options.noiseCipher !== undefined) return '--noise-cipher needs --registry';
    if (options.exitOnStdinClose) return '--exit-on-stdin-close needs --registry';
    return null;
  }
  if (options.environmentId === undefined) return '--registry needs --environment-id';
  if (options.listen?.kind === 'stdio') return '--registry cannot be combined with --listen stdio';
  const registry = new URL(options.registry);
  if (registry.protocol === 'http:' && !isLoopbackHost(registry.hostname) && !options.allowInsecureRegistry) {
    return `--registry ${registry.origin}: plain http to a host that is not loopback would send the API key and every harness authorization in the clear; use https://, or pass --allow-insecure-registry on a network you trust`;
  }
  return null;
}

/** Flags that only mean something with --registry. */
function checkRemoteOnlyFlags(options: ExecutorOptions): string | null {
  if (options.registry !== undefined) return null;
  for (const [set, flag] of [
    [options.apiKeyFile !== undefined, '--api-key-file'],
    [options.apiKeyFd !== undefined, '--api-key-fd'],
    [options.allowApiKeyEnv, '--allow-api-key-env'],
    [options.allowInsecureRegistry, '--allow-insecure-registry'],
  ] as const) {
    if (set) return `${flag} needs --registry`;
  }
  return null;
}

const NO_KEY_MESSAGE = `--registry needs an API key: --api-key-file PATH (mode 0600), --api-key-fd N, or ${API_KEY_ENV} (or ${CODEX_API_KEY_ENV})`;

/** The key, and where it came from (`--api-key-file`, `TETHER_EXECUTOR_API_KEY`, …) for messages. */
type KeyOutcome = { key: string; origin: string } | { exitCode: number };

/** Where a source's key comes from, for messages: a flag or a variable's name (never the key). */
function originOf(source: ApiKeySource, env: NodeJS.ProcessEnv): string {
  if (source.kind === 'env') return source.variable;
  if (source.kind === 'file') return source.flag;
  // A descriptor the executor handed itself names the variable the key was in before.
  const handed = env[KEY_ORIGIN_ENV];
  return handed !== undefined && (API_KEY_ENV_VARS as readonly string[]).includes(handed) ? handed : '--api-key-fd';
}

/**
 * Gets remote mode's API key so that no child can read it from this process's environment: a key in an
 * environment variable is handed to a re-executed image of this process (which does not return), a
 * variable that is set beside a file or descriptor is dropped the same way. Where re-executing is
 * impossible the key in the environment is refused unless the user accepted the exposure.
 */
function obtainApiKey(
  options: ExecutorOptions,
  io: CliIo,
  platform: ExecutorPlatform,
  deprecations: Deprecations,
): KeyOutcome {
  // Nothing re-executes after a failure: the parse's deprecations come first, then the failure.
  const fail = (text: string): KeyOutcome => {
    deprecations.flush();
    io.stderr.write(text);
    return { exitCode: 2 };
  };
  let source: ReturnType<typeof chooseApiKeySource>;
  try {
    source = chooseApiKeySource(options, io.env);
  } catch (err) {
    if (!(err instanceof ApiKeyError)) throw err;
    return fail(`executor: ${err.message}\n`);
  }
  if (source === null) {
    return fail(`executor: ${NO_KEY_MESSAGE}\n`);
  }
  // The deprecated shared names, said when used: the key's variable at once (the re-executed executor no
  // longer has it), a key file's with the parse's lines (it is read again after the re-exec).
  if (source.kind === 'env' && source.variable === DEPRECATED_API_KEY_ENV) {
    deprecations.warnNow(DEPRECATED_API_KEY_ENV, API_KEY_ENV, SHARED_WITH_HARNESS);
  }
  if (source.kind === 'file' && source.flag === API_KEY_FILE_ENV) {
    deprecations.warn(API_KEY_FILE_ENV, 'TETHER_EXECUTOR_API_KEY_FILE', SHARED_WITH_HARNESS);
  }
  const origin = originOf(source, io.env);
  const exposed = apiKeyVariablesIn(io.env);
  try {
    if (exposed.length > 0) {
      if (canHandOver(platform.exec)) {
        // Never returns: the new image starts with --api-key-fd and without the variables.
        if (source.kind === 'env') {
          handOverApiKey(readApiKey(source, io.env), platform.commandLine(), platform.exec, undefined, origin);
        }
        handOverApiKey(null, platform.commandLine(), platform.exec, source.kind === 'fd' ? source.fd : undefined);
      }
      const why = handoverUnavailableReason(platform.exec);
      if (!options.allowApiKeyEnv) {
        const where = `/proc/${process.pid}/environ, and this executor cannot re-execute itself without it (missing: ${why})`;
        return fail(
          source.kind === 'env'
            ? `executor: the API key is in ${exposed.join(' and ')}, where every child process can read it from ${where}. Pass it with --api-key-file or --api-key-fd instead, or accept the exposure with --allow-api-key-env\n`
            : `executor: ${exposed.join(' and ')} holds an API key (not the one used: that comes from ${origin}) that every child process could read from ${where}. Unset it, or accept the exposure with --allow-api-key-env\n`,
        );
      }
      io.stderr.write(
        `executor: WARNING: ${exposed.join(' and ')} stays readable by every child process in /proc/${process.pid}/environ (--allow-api-key-env; cannot re-execute: ${why})\n`,
      );
    }
    return { key: readApiKey(source, io.env), origin };
  } catch (err) {
    if (!(err instanceof ApiKeyError)) throw err;
    return fail(`executor: ${err.message}\n`);
  }
}

/**
 * Remote mode holds the key in memory: a non-dumpable process cannot be ptrace'd or have its
 * /proc/<pid>/{mem,environ} read by other processes of the same user (root keeps CAP_SYS_PTRACE).
 * Children are unaffected: exec makes them dumpable again.
 */
function protectMemory(io: CliIo, platform: ExecutorPlatform, log: Logger): void {
  if (/^(1|true|yes)$/i.test(io.env[DUMPABLE_ENV] ?? '')) {
    log.warn(`${DUMPABLE_ENV} is set: same-user processes can read this executor's memory (and its API key)`);
    return;
  }
  const unprotected =
    'cannot mark the executor non-dumpable: same-user processes can read its memory (and its API key)';
  if (!platform.exec.setDumpable) {
    log.warn({ reason: `@tether/native-pipe: ${platform.exec.unavailableReason ?? 'no setDumpable'}` }, unprotected);
    return;
  }
  try {
    platform.exec.setDumpable(false);
  } catch (err) {
    log.warn({ reason: (err as Error).message }, unprotected);
  }
}

/**
 * A descriptor left open by whoever started the executor (fd 100 on a host file, say) would be inherited
 * by every command: bubblewrap passes it into a sandbox too, where a write through it reaches the host
 * file that a read-only mount protects from `open`. sshd closes such descriptors for its sessions; here
 * every descriptor above 2 becomes close-on-exec (none is closed: Node's and libuv's own have the flag
 * already). What a command is meant to get still reaches it: libuv dup2s a child's stdio array into
 * place, which clears the flag on the copy (bubblewrap's seccomp fd 3, pipes from @tether/native-pipe).
 */
function markInheritedCloseOnExec(platform: ExecutorPlatform): { marked: number } | { problem: string } {
  if (!platform.exec.setCloexecAbove) {
    return { problem: `@tether/native-pipe: ${platform.exec.unavailableReason ?? 'no setCloexecAbove'}` };
  }
  try {
    return { marked: platform.exec.setCloexecAbove(2) };
  } catch (err) {
    return { problem: (err as Error).message };
  }
}

/** The warning for a WebSocket listener reachable from other hosts, or null for a loopback one. */
export function exposedListenerWarning(host: string): string | null {
  if (isLoopbackHost(host)) return null;
  return `the WebSocket listener on ${host} is unauthenticated: anyone who can reach it can run commands as this user; bind 127.0.0.1 (and tunnel) or use --registry`;
}

function envFlag(env: NodeJS.ProcessEnv, names: readonly string[]): boolean {
  return names.some((name) => /^(1|true|yes)$/i.test(env[name] ?? ''));
}

/** Runs the executor until a signal or (stdio) EOF; returns the process exit code. */
export async function runExecutor(
  options: ExecutorOptions,
  io: CliIo,
  logger?: Logger,
  platform: ExecutorPlatform = { exec: platformExecSupport(), commandLine: currentCommandLine },
): Promise<number> {
  const deprecations = options.deprecations ?? new Deprecations('executor', (text) => io.stderr.write(text));
  const modeProblem = checkModes(options) ?? checkRemoteOnlyFlags(options);
  if (modeProblem) {
    deprecations.flush();
    io.stderr.write(`executor: ${modeProblem} (see executor --help)\n`);
    return 2;
  }
  const exitOnStdinClose = options.exitOnStdinClose === true || envFlag(io.env, EXIT_ON_STDIN_CLOSE_ENV);
  let apiKey = '';
  let keyOrigin = '';
  if (options.registry !== undefined) {
    const outcome = obtainApiKey(options, io, platform, deprecations);
    deprecations.flush();
    if ('exitCode' in outcome) return outcome.exitCode;
    ({ key: apiKey, origin: keyOrigin } = outcome);
  }
  // This image runs on (it re-executed itself for the key, if it had to): the parse's deprecations, once.
  deprecations.flush();
  // After --api-key-fd is read (and closed): nothing inherited above 2 reaches a command.
  const inherited = markInheritedCloseOnExec(platform);
  // Neither the parent-lifetime switch nor anything naming the registry key reaches a child process.
  for (const name of [...EXIT_ON_STDIN_CLOSE_ENV, ...API_KEY_ENV_VARS, API_KEY_FILE_ENV, ...KEY_SOURCE_ENV]) {
    delete io.env[name];
    delete process.env[name];
  }

  let config: ExecutorConfig;
  let warnings: string[];
  try {
    ({ config, warnings } = loadConfig({
      ...(options.config ? { path: options.config, explicit: true } : { path: defaultConfigPath(io.env) }),
      strict: options.strictConfig,
    }));
  } catch (err) {
    if (err instanceof ConfigError) {
      io.stderr.write(`executor: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  if (options.concurrentRequests !== undefined) config.concurrentRequests = options.concurrentRequests;
  const forwardProblem = applyForwardFlags(config, options);
  if (forwardProblem !== null) {
    io.stderr.write(`executor: ${forwardProblem}\n`);
    return 2;
  }
  // Registry calls, the relay socket, `http/request` and OTLP go through the environment's proxies, as
  // Codex's do (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY; @tether/outbound).
  let proxy: ProxySettings;
  try {
    proxy = proxySettingsFromEnv(io.env);
  } catch (err) {
    if (err instanceof ProxyConfigError) {
      io.stderr.write(`executor: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  if (options.maxDetachedProcesses !== undefined) config.maxDetachedProcesses = options.maxDetachedProcesses;
  const log = logger ?? createLogger(options.logLevel ?? config.logLevel, options.logFormat);
  for (const warning of warnings) log.warn({ warning }, 'ignoring config problem (use --strict-config to fail)');
  if (options.registry !== undefined) protectMemory(io, platform, log);
  if ('problem' in inherited) {
    log.warn(
      { reason: inherited.problem },
      'cannot make inherited descriptors close-on-exec: any descriptor above 2 this executor inherited from its launcher reaches every command it runs, sandboxed ones included (a write through one bypasses the sandbox)',
    );
  } else if (inherited.marked > 0) {
    log.info({ descriptors: inherited.marked }, 'inherited descriptors made close-on-exec');
  }

  // Codex exports exec-server metrics whenever `[otel] metrics_exporter` names a collector; `[analytics]
  // enabled` does not gate them (observed with codex 0.171.0), so it does not here either. Without it the
  // OTEL_* variables may name one. A WebSocket listener also serves them on /metrics.
  const servesHttp = options.listen ? options.listen.kind === 'websocket' : options.registry === undefined;
  const telemetry = await Telemetry.create(
    executorTelemetryOptions(config, io.env, {
      serviceVersion: EXECUTOR_VERSION,
      proxy,
      prometheus: servesHttp,
      onError: (err) => log.warn({ err: err.message }, 'metrics export failed'),
      onIgnored: (err) => log.warn({ err: err.message }, 'ignoring the OTEL_* variables'),
    }),
  );
  const metrics = new ExecutorMetrics(telemetry);
  // The bin spawns only through local-process, so it may adopt what escapes with setsid (a subreaper).
  const server = new ExecServer({ config, logger: log, metrics, subreaper: true, proxy });
  // Whether `sandbox` profiles (Codex's -s read-only / workspace-write) can be enforced here, and if not why.
  if (server.sandbox.status.available) log.info({ bwrap: server.sandbox.status.bwrap }, 'sandbox available');
  else
    log.warn(
      { reason: server.sandbox.status.reason },
      'sandbox unavailable: restricting sandbox profiles will be refused',
    );
  let stopRequested!: () => void;
  const stop = new Promise<void>((resolve) => {
    stopRequested = resolve;
  });
  const onSignal = (signal: NodeJS.Signals) => {
    log.info({ signal }, 'shutting down');
    stopRequested();
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  let remote: RemoteLink | null = null;
  let exitCode = 0;
  try {
    if (options.registry !== undefined) {
      remote = new RemoteLink({
        registryUrl: options.registry,
        environmentId: options.environmentId!,
        apiKey,
        identity: generateIdentity({
          suite: options.noiseCipher === 'chachapoly' ? SUITE_HYBRID_CHACHAPOLY : SUITE_HYBRID_AESGCM,
        }),
        logger: log,
        metrics,
        proxy,
        maxMessageBytes: config.maxMessageBytes,
        // Each relay stream acts for the key the registry's /validate named (principal.ts).
        onStream: (stream, principal) => server.serve(new RpcConnection(stream), { principal }),
      });
      const link = remote;
      server.readinessCheck = () => link.ready;
      // A signal while registering (a registry that keeps failing is retried) stops it too.
      const started = remote.start().then(() => 'started' as const);
      started.catch(() => undefined);
      let outcome: 'started' | 'stopped';
      try {
        outcome = await Promise.race([started, stop.then(() => 'stopped' as const)]);
      } catch (err) {
        if (err instanceof RegistryError) {
          io.stderr.write(
            `executor: cannot register environment ${options.environmentId}: ${keyRefusalText(err, keyOrigin)}\n`,
          );
          return 1;
        }
        throw err;
      }
      if (outcome === 'stopped') return 0;
      // A key revoked while we run ends the executor (non-zero) instead of re-registering forever.
      void link.failed.then((err) => {
        io.stderr.write(
          `executor: environment ${options.environmentId} lost its registration: ${keyRefusalText(err, keyOrigin)}; exiting\n`,
        );
        exitCode = 1;
        stopRequested();
      });
      if (exitOnStdinClose) {
        io.stdin.on('end', () => {
          log.info('stdin closed: shutting down');
          stopRequested();
        });
        io.stdin.on('error', () => stopRequested());
        io.stdin.resume();
      }
    }
    if (options.listen?.kind === 'stdio') {
      await Promise.race([server.serveStdio(io.stdin, io.stdout), stop]);
    } else {
      const listen = options.listen ?? (remote ? null : parseListenUrl(DEFAULT_LISTEN_URL));
      if (listen?.kind === 'websocket') {
        // Said before binding, so that it is said even when the bind then fails.
        const exposure = exposedListenerWarning(listen.host);
        if (exposure) log.warn({ host: listen.host, port: listen.port }, exposure);
        let url: string;
        try {
          url = await server.listen(listen.host, listen.port);
        } catch (err) {
          io.stderr.write(`executor: cannot listen on ${listen.host}:${listen.port}: ${(err as Error).message}\n`);
          return 1;
        }
        io.stdout.write(`${url}\n`);
      }
      await stop;
    }
  } finally {
    await remote?.close();
    await server.close();
    // Every exit path (stdio EOF, SIGTERM/SIGINT, parent stdin closed, a failed start) ends here: the
    // last export, with every process counted as finished, reaches the collector before we exit.
    await telemetry.shutdown();
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
  }
  return exitCode;
}

/**
 * A registry error, plus what a 401/403 means for an executor: retrying will not help. A key from the
 * deprecated TETHER_API_KEY is likely a harness key (a shell set up for the harness exports it): said so.
 */
function keyRefusalText(err: RegistryError, origin: string): string {
  const shared =
    origin === DEPRECATED_API_KEY_ENV
      ? `; it came from ${DEPRECATED_API_KEY_ENV}, which the harness reads as its own key: is it a harness key? Give the executor's key in ${API_KEY_ENV} or --api-key-file`
      : '';
  if (err.status === 401) return `${err.message} (the API key was revoked or is wrong${shared})`;
  if (isKeyRefusal(err)) return `${err.message} (the API key was revoked, or may not serve this environment${shared})`;
  return err.message;
}
