import { RpcConnection } from '@tether/jsonrpc';
import { Telemetry } from '@tether/telemetry';
import { Command, InvalidArgumentError } from 'commander';
import { ConfigError, defaultConfigPath, type ExecutorConfig, loadConfig } from './config.js';
import { EXECUTOR_VERSION } from './environment-info.js';
import { DEFAULT_LISTEN_URL, type ListenTarget, ListenUrlError, parseListenUrl } from './listen-url.js';
import { createLogger, type Logger } from './logger.js';
import { ExecutorMetrics } from './metrics.js';
import { checkEnvironmentId, parseRegistryUrl, RegistryError } from './remote/registry-client.js';
import { API_KEY_ENV_VARS, RemoteLink } from './remote/remote-link.js';
import { ExecServer } from './server.js';

/** Set to `true` (or `1`) to shut a remote executor down when its stdin closes; stripped from children. */
export const EXIT_ON_STDIN_CLOSE_ENV = ['TETHER_EXECUTOR_EXIT_ON_STDIN_CLOSE', 'CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE'];

export interface CliIo {
  stdin: NodeJS.ReadableStream & import('node:stream').Readable;
  stdout: NodeJS.WritableStream & import('node:stream').Writable;
  stderr: NodeJS.WritableStream;
  env: NodeJS.ProcessEnv;
}

function positiveInteger(value: string): number {
  const parsed = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(parsed) || parsed < 1) {
    throw new InvalidArgumentError('expected a positive integer');
  }
  return parsed;
}

function registryUrl(value: string): string {
  try {
    return parseRegistryUrl(value);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
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
  remote?: string;
  environmentId?: string;
  exitOnStdinClose?: boolean;
  concurrentRequests?: number;
  config?: string;
  strictConfig: boolean;
}

export function buildCommand(run: (options: ExecutorOptions) => Promise<void>): Command {
  return new Command('executor')
    .description(
      'Tether executor: serves the Codex exec-server protocol (run and control processes) over stdio or WebSocket.',
    )
    .version(EXECUTOR_VERSION)
    .option(
      '--listen <url>',
      `where to serve: ws://IP:PORT (port 0 picks one; the bound URL is printed on stdout) or stdio (default: ${DEFAULT_LISTEN_URL}; with --remote: no local listener unless given)`,
      listenTarget,
    )
    .option(
      '--remote <registry-url>',
      'remote mode: register with this Tether (or Codex-compatible) registry and serve harnesses through its relay; the API key comes from TETHER_API_KEY (or CODEX_API_KEY)',
      registryUrl,
    )
    .option('--environment-id <id>', 'the environment this executor serves (required with --remote)', environmentId)
    .option(
      '--exit-on-stdin-close',
      `with --remote: shut down gracefully when stdin closes (for a parent that owns this process; also ${EXIT_ON_STDIN_CLOSE_ENV.join(' or ')}=true)`,
    )
    .option(
      '--concurrent-requests <n>',
      'requests handled at once per connection; 1 = strictly in order (default from config, else 1)',
      positiveInteger,
    )
    .option('--config <path>', `TOML config file (default: ${defaultConfigPath()}, i.e. $TETHER_HOME/config.toml)`)
    .option('--strict-config', 'fail on unknown or invalid config keys instead of ignoring them', false)
    .addHelpText(
      'after',
      `
Examples:
  executor                                  serve on ws://127.0.0.1:<free port>
  executor --listen ws://127.0.0.1:8765     serve on a fixed port
  executor --listen stdio                   one client over stdin/stdout (exits when stdin closes)
  TETHER_API_KEY=… executor --remote http://127.0.0.1:8080 --environment-id dev-1
                                            register and serve harnesses through the relay

Endpoints (WebSocket mode): / (WebSocket upgrade), GET /readyz, GET /livez. Requests carrying an Origin
header are refused with 403. Logs are JSON on stderr (level: TETHER_LOG or [logging] level).`,
    )
    .action(async (options: ExecutorOptions) => run(options));
}

/** Runs the executor until a signal or (stdio) EOF; returns the process exit code. */
/** Checks flag combinations that commander cannot express; returns an error message or null. */
function checkModes(options: ExecutorOptions): string | null {
  if (options.remote === undefined) {
    if (options.environmentId !== undefined) return '--environment-id needs --remote';
    if (options.exitOnStdinClose) return '--exit-on-stdin-close needs --remote';
    return null;
  }
  if (options.environmentId === undefined) return '--remote needs --environment-id';
  if (options.listen?.kind === 'stdio') return '--remote cannot be combined with --listen stdio';
  return null;
}

function envFlag(env: NodeJS.ProcessEnv, names: readonly string[]): boolean {
  return names.some((name) => /^(1|true|yes)$/i.test(env[name] ?? ''));
}

/** Runs the executor until a signal or (stdio) EOF; returns the process exit code. */
export async function runExecutor(options: ExecutorOptions, io: CliIo, logger?: Logger): Promise<number> {
  const modeProblem = checkModes(options);
  if (modeProblem) {
    io.stderr.write(`executor: ${modeProblem} (see executor --help)\n`);
    return 2;
  }
  const exitOnStdinClose = options.exitOnStdinClose === true || envFlag(io.env, EXIT_ON_STDIN_CLOSE_ENV);
  let apiKey = '';
  let apiKeyVar: string | undefined;
  if (options.remote !== undefined) {
    apiKeyVar = API_KEY_ENV_VARS.find((name) => (io.env[name] ?? '').trim() !== '');
    apiKey = apiKeyVar ? (io.env[apiKeyVar] ?? '').trim() : '';
    if (apiKey === '') {
      io.stderr.write(`executor: --remote needs an API key in ${API_KEY_ENV_VARS.join(' or ')}\n`);
      return 2;
    }
  }
  // Neither the parent-lifetime switch nor the registry key this executor uses reaches a child process.
  for (const name of [...EXIT_ON_STDIN_CLOSE_ENV, 'TETHER_API_KEY', ...(apiKeyVar ? [apiKeyVar] : [])]) {
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
  const log = logger ?? createLogger(io.env.TETHER_LOG ?? config.logLevel);
  for (const warning of warnings) log.warn({ warning }, 'ignoring config problem (use --strict-config to fail)');

  // Codex exports exec-server metrics whenever `[otel] metrics_exporter` names a collector; `[analytics]
  // enabled` does not gate them (observed with codex 0.171.0), so it does not here either.
  const telemetry = await Telemetry.create({
    serviceName: 'tether-executor',
    serviceVersion: EXECUTOR_VERSION,
    environment: config.otelEnvironment,
    otlpHttp: config.metricsExporter,
    onError: (err) => log.warn({ err: err.message }, 'metrics export failed'),
  });
  const metrics = new ExecutorMetrics(telemetry);
  const server = new ExecServer({ config, logger: log, metrics });
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
  try {
    if (options.remote !== undefined) {
      remote = new RemoteLink({
        registryUrl: options.remote,
        environmentId: options.environmentId!,
        apiKey,
        logger: log,
        pingIntervalMs: config.pingIntervalMs,
        metrics,
        onStream: (stream) => server.serve(new RpcConnection(stream)),
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
          io.stderr.write(`executor: cannot register environment ${options.environmentId}: ${err.message}\n`);
          return 1;
        }
        throw err;
      }
      if (outcome === 'stopped') return 0;
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
  return 0;
}
