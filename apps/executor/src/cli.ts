import { RpcConnection } from '@tether/jsonrpc';
import { generateIdentity, SUITE_HYBRID_AESGCM, SUITE_HYBRID_CHACHAPOLY } from '@tether/noise';
import { ProxyConfigError, type ProxySettings, proxySettingsFromEnv } from '@tether/outbound';
import { Telemetry } from '@tether/telemetry';
import { Deprecations } from '@tether/telemetry/cli';
import { KEY_ENV, keyRefusalText, obtainApiKey } from './cli-api-key.js';
import { applyForwardFlags, exposedListenerWarning, flagProblem } from './cli-checks.js';
import { EXIT_ON_STDIN_CLOSE_ENV, type ExecutorOptions } from './cli-flags.js';
import { ConfigError, defaultConfigPath, type ExecutorConfig, loadConfig } from './config.js';
import { EXECUTOR_VERSION } from './environment-info.js';
import { currentPlatform, type ExecutorPlatform } from './key-handover.js';
import { DEFAULT_LISTEN_URL, type ListenTarget, parseListenUrl } from './listen-url.js';
import { createLogger, type Logger } from './logger.js';
import { ExecutorMetrics, executorTelemetryOptions } from './metrics.js';
import { markInheritedCloseOnExec, protectMemory, reportInherited } from './process-guards.js';
import { RecordDirError } from './recordings.js';
import { RegistryError } from './remote/registry-client.js';
import { RemoteLink } from './remote/remote-link.js';
import { ExecServer } from './server.js';

/**
 * `runExecutor`: the executor's run, composed of steps that each take the values they use. The flags are defined
 * in cli-flags.ts, checked together in cli-checks.ts, and helped in cli-help.ts; the key is got in cli-api-key.ts.
 */

export { applyForwardFlags, exposedListenerWarning } from './cli-checks.js';
export {
  buildCommand,
  EXECUTOR_ENV,
  EXIT_ON_STDIN_CLOSE_ENV,
  type ExecutorOptions,
} from './cli-flags.js';
export type { ExecutorPlatform } from './key-handover.js';
export { DUMPABLE_ENV } from './process-guards.js';

export interface CliIo {
  stdin: NodeJS.ReadableStream & import('node:stream').Readable;
  stdout: NodeJS.WritableStream & import('node:stream').Writable;
  stderr: NodeJS.WritableStream;
  env: NodeJS.ProcessEnv;
}

/** Remote mode as the flags and the key settle it (`--registry`). */
interface RemoteSettings {
  registryUrl: string;
  environmentId: string;
  noiseCipher: 'aesgcm' | 'chachapoly' | undefined;
  apiKey: string;
  /** Where the key came from (a flag or a variable), for messages. */
  keyOrigin: string;
  exitOnStdinClose: boolean;
}

/** The config file under the flags that override it, and the environment's proxies. */
interface Settings {
  config: ExecutorConfig;
  /** The config's problems that were ignored (not --strict-config), said once there is a logger. */
  warnings: string[];
  proxy: ProxySettings;
}

/** Runs the executor until a signal or (stdio) EOF; returns the process exit code. */
export async function runExecutor(
  options: ExecutorOptions,
  io: CliIo,
  logger?: Logger,
  platform: ExecutorPlatform = currentPlatform(),
): Promise<number> {
  const deprecations = options.deprecations ?? new Deprecations('executor', (text) => io.stderr.write(text));
  const problem = flagProblem(options);
  if (problem !== null) {
    deprecations.flush();
    io.stderr.write(`executor: ${problem} (see executor --help)\n`);
    return 2;
  }
  const remote = options.registry === undefined ? null : remoteSettings(options, io, platform, deprecations);
  if (typeof remote === 'number') return remote;
  // This image runs on (it re-executed itself for the key, if it had to): the parse's deprecations, once.
  deprecations.flush();
  // After --api-key-fd is read (and closed): nothing inherited above 2 reaches a command.
  const inherited = markInheritedCloseOnExec(platform.exec);
  // Neither the parent-lifetime switch nor anything naming the registry key reaches a child process.
  for (const name of [...EXIT_ON_STDIN_CLOSE_ENV, ...KEY_ENV]) {
    delete io.env[name];
    delete process.env[name];
  }
  const settings = loadSettings(options, io.env);
  if (typeof settings === 'string') {
    io.stderr.write(`executor: ${settings}\n`);
    return 2;
  }
  const log = logger ?? createLogger(options.logLevel ?? settings.config.logLevel, options.logFormat);
  for (const warning of settings.warnings)
    log.warn({ warning }, 'ignoring config problem (use --strict-config to fail)');
  if (remote) protectMemory(io.env, platform.exec, log);
  reportInherited(inherited, log);
  const listen = options.listen ?? (remote ? null : parseListenUrl(DEFAULT_LISTEN_URL));
  return serve({ ...settings, log, io, remote, listen });
}

/** Remote mode's settings, its key obtained (which may re-execute this process); else the exit code. */
function remoteSettings(
  options: ExecutorOptions,
  io: CliIo,
  platform: ExecutorPlatform,
  deprecations: Deprecations,
): RemoteSettings | number {
  const exitOnStdinClose =
    options.exitOnStdinClose === true ||
    EXIT_ON_STDIN_CLOSE_ENV.some((name) => /^(1|true|yes)$/i.test(io.env[name] ?? ''));
  const outcome = obtainApiKey(options, io, platform, deprecations);
  deprecations.flush();
  if ('exitCode' in outcome) return outcome.exitCode;
  return {
    registryUrl: options.registry as string,
    environmentId: options.environmentId as string,
    noiseCipher: options.noiseCipher,
    apiKey: outcome.key,
    keyOrigin: outcome.origin,
    exitOnStdinClose,
  };
}

/** The config file with the flags over it, and the proxies; else the problem (exit 2). */
function loadSettings(
  flags: Pick<
    ExecutorOptions,
    | 'config'
    | 'strictConfig'
    | 'concurrentRequests'
    | 'maxDetachedProcesses'
    | 'forward'
    | 'forwardAllow'
    | 'recordDir'
    | 'recordFailure'
  >,
  env: NodeJS.ProcessEnv,
): Settings | string {
  let loaded: ReturnType<typeof loadConfig>;
  try {
    loaded = loadConfig({
      ...(flags.config ? { path: flags.config, explicit: true } : { path: defaultConfigPath(env) }),
      strict: flags.strictConfig,
    });
  } catch (err) {
    if (err instanceof ConfigError) return err.message;
    throw err;
  }
  const { config, warnings } = loaded;
  if (flags.concurrentRequests !== undefined) config.concurrentRequests = flags.concurrentRequests;
  const forwardProblem = applyForwardFlags(config, flags);
  if (forwardProblem !== null) return forwardProblem;
  if (flags.maxDetachedProcesses !== undefined) config.maxDetachedProcesses = flags.maxDetachedProcesses;
  if (flags.recordDir !== undefined) config.recordDir = flags.recordDir;
  if (flags.recordFailure !== undefined) config.recordFailure = flags.recordFailure;
  // Registry calls, the relay socket, `http/request` and OTLP go through the environment's proxies, as
  // Codex's do (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY; @tether/outbound).
  try {
    return { config, warnings, proxy: proxySettingsFromEnv(env) };
  } catch (err) {
    if (err instanceof ProxyConfigError) return err.message;
    throw err;
  }
}

/** Ends the run: on SIGTERM/SIGINT, or when a part of it asks (with the exit code it ends with). */
interface Stop {
  readonly requested: Promise<void>;
  request(exitCode?: number): void;
  readonly exitCode: number;
  /** Stops listening for the signals. */
  dispose(): void;
}

function stopOnSignals(log: Logger): Stop {
  let resolve!: () => void;
  const requested = new Promise<void>((done) => {
    resolve = done;
  });
  const onSignal = (signal: NodeJS.Signals) => {
    log.info({ signal }, 'shutting down');
    resolve();
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  const stop = {
    requested,
    exitCode: 0,
    request(exitCode?: number) {
      if (exitCode !== undefined) stop.exitCode = exitCode;
      resolve();
    },
    dispose() {
      process.off('SIGTERM', onSignal);
      process.off('SIGINT', onSignal);
    },
  };
  return stop;
}

interface ServeOptions extends Omit<Settings, 'warnings'> {
  log: Logger;
  io: CliIo;
  remote: RemoteSettings | null;
  /** Where to serve locally: `--listen`, else the default WebSocket without --registry, else nowhere. */
  listen: ListenTarget | null;
}

/** Serves until stopped: telemetry, the server, the relay link (remote mode) and the local listener. */
async function serve({ config, proxy, log, io, remote, listen }: ServeOptions): Promise<number> {
  // Codex exports exec-server metrics whenever `[otel] metrics_exporter` names a collector; `[analytics]
  // enabled` does not gate them (observed with codex 0.171.0), so it does not here either. Without it the
  // OTEL_* variables may name one. A WebSocket listener also serves them on /metrics.
  const telemetry = await Telemetry.create(
    executorTelemetryOptions(config, io.env, {
      serviceVersion: EXECUTOR_VERSION,
      proxy,
      prometheus: listen?.kind === 'websocket',
      onError: (err) => log.warn({ err: err.message }, 'metrics export failed'),
      onIgnored: (err) => log.warn({ err: err.message }, 'ignoring the OTEL_* variables'),
    }),
  );
  const metrics = new ExecutorMetrics(telemetry);
  // The bin spawns only through local-process, so it may adopt what escapes with setsid (a subreaper).
  let server: ExecServer;
  try {
    server = new ExecServer({ config, logger: log, metrics, subreaper: true, proxy });
  } catch (err) {
    if (!(err instanceof RecordDirError)) throw err;
    io.stderr.write(`executor: ${err.message}\n`);
    await telemetry.shutdown();
    return 1;
  }
  if (server.recordings) {
    // Printed for whoever checks the recordings later (harness recording verify --key …); also in the directory.
    io.stderr.write(
      `executor: recording every process session in ${server.recordings.options.dir} (key ${server.recordings.publicKey}, failure policy ${server.recordings.options.failurePolicy})\n`,
    );
  }
  // Whether `sandbox` profiles (Codex's -s read-only / workspace-write) can be enforced here, and if not why.
  if (server.sandbox.status.available) log.info({ bwrap: server.sandbox.status.bwrap }, 'sandbox available');
  else
    log.warn(
      { reason: server.sandbox.status.reason },
      'sandbox unavailable: restricting sandbox profiles will be refused',
    );
  if (server.sandbox.status.available && !server.sandbox.transparentTcp.available) {
    log.info(
      { reason: server.sandbox.transparentTcp.reason },
      'transparent TCP unavailable: networkProxy.proxy.transparentTcp will be refused',
    );
  }
  const stop = stopOnSignals(log);
  let link: RemoteLink | null = null;
  try {
    if (remote) {
      link = new RemoteLink({
        registryUrl: remote.registryUrl,
        environmentId: remote.environmentId,
        apiKey: remote.apiKey,
        identity: generateIdentity({
          suite: remote.noiseCipher === 'chachapoly' ? SUITE_HYBRID_CHACHAPOLY : SUITE_HYBRID_AESGCM,
        }),
        logger: log,
        metrics,
        proxy,
        maxMessageBytes: config.maxMessageBytes,
        // Each relay stream acts for the key the registry's /validate named (principal.ts).
        onStream: (stream, principal) => server.serve(new RpcConnection(stream), { principal }),
      });
      const registered = link;
      server.readinessCheck = () => registered.ready;
      const exitCode = await register(registered, remote, stop, io, log);
      if (exitCode !== null) return exitCode;
    }
    const exitCode = await serveLocally(listen, server, io, log, stop.requested);
    if (exitCode !== null) return exitCode;
  } finally {
    await link?.close();
    await server.close();
    // Every exit path (stdio EOF, SIGTERM/SIGINT, parent stdin closed, a failed start) ends here: the
    // last export, with every process counted as finished, reaches the collector before we exit.
    await telemetry.shutdown();
    stop.dispose();
  }
  return stop.exitCode;
}

/**
 * Registers and links to the relay: null once linked (a lost registration or, with --exit-on-stdin-close, the
 * end of stdin then stops the run), else the exit code (a refused registration, or stopped while registering).
 */
async function register(
  link: RemoteLink,
  remote: Pick<RemoteSettings, 'environmentId' | 'keyOrigin' | 'exitOnStdinClose'>,
  stop: Stop,
  io: Pick<CliIo, 'stdin' | 'stderr'>,
  log: Logger,
): Promise<number | null> {
  // A signal while registering (a registry that keeps failing is retried) stops it too.
  const started = link.start().then(() => 'started' as const);
  started.catch(() => undefined);
  let outcome: 'started' | 'stopped';
  try {
    outcome = await Promise.race([started, stop.requested.then(() => 'stopped' as const)]);
  } catch (err) {
    if (err instanceof RegistryError) {
      io.stderr.write(
        `executor: cannot register environment ${remote.environmentId}: ${keyRefusalText(err, remote.keyOrigin)}\n`,
      );
      return 1;
    }
    throw err;
  }
  if (outcome === 'stopped') return 0;
  // A key revoked while we run ends the executor (non-zero) instead of re-registering forever.
  void link.failed.then((err) => {
    io.stderr.write(
      `executor: environment ${remote.environmentId} lost its registration: ${keyRefusalText(err, remote.keyOrigin)}; exiting\n`,
    );
    stop.request(1);
  });
  if (remote.exitOnStdinClose) {
    io.stdin.on('end', () => {
      log.info('stdin closed: shutting down');
      stop.request();
    });
    io.stdin.on('error', () => stop.request());
    io.stdin.resume();
  }
  return null;
}

/** Serves stdio or a WebSocket listener (or nothing: remote mode alone) until stopped; 1 if it cannot bind. */
async function serveLocally(
  listen: ListenTarget | null,
  server: ExecServer,
  io: Pick<CliIo, 'stdin' | 'stdout' | 'stderr'>,
  log: Logger,
  stopped: Promise<void>,
): Promise<number | null> {
  if (listen?.kind === 'stdio') {
    await Promise.race([server.serveStdio(io.stdin, io.stdout), stopped]);
    return null;
  }
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
  await stopped;
  return null;
}
