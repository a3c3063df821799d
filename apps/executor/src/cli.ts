import { Command, InvalidArgumentError } from 'commander';
import { ConfigError, defaultConfigPath, type ExecutorConfig, loadConfig } from './config.js';
import { EXECUTOR_VERSION } from './environment-info.js';
import { DEFAULT_LISTEN_URL, type ListenTarget, ListenUrlError, parseListenUrl } from './listen-url.js';
import { createLogger, type Logger } from './logger.js';
import { ExecServer } from './server.js';

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

function listenTarget(value: string): ListenTarget {
  try {
    return parseListenUrl(value);
  } catch (err) {
    if (err instanceof ListenUrlError) throw new InvalidArgumentError(err.message);
    throw err;
  }
}

export interface ExecutorOptions {
  listen: ListenTarget;
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
      `where to serve: ws://IP:PORT (port 0 picks one; the bound URL is printed on stdout) or stdio`,
      listenTarget,
      parseListenUrl(DEFAULT_LISTEN_URL),
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

Endpoints (WebSocket mode): / (WebSocket upgrade), GET /readyz, GET /livez. Requests carrying an Origin
header are refused with 403. Logs are JSON on stderr (level: TETHER_LOG or [logging] level).`,
    )
    .action(async (options: ExecutorOptions) => run(options));
}

/** Runs the executor until a signal or (stdio) EOF; returns the process exit code. */
export async function runExecutor(options: ExecutorOptions, io: CliIo, logger?: Logger): Promise<number> {
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

  const server = new ExecServer({ config, logger: log });
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
  try {
    if (options.listen.kind === 'stdio') {
      await Promise.race([server.serveStdio(io.stdin, io.stdout), stop]);
    } else {
      let url: string;
      try {
        url = await server.listen(options.listen.host, options.listen.port);
      } catch (err) {
        io.stderr.write(
          `executor: cannot listen on ${options.listen.host}:${options.listen.port}: ${(err as Error).message}\n`,
        );
        return 1;
      }
      io.stdout.write(`${url}\n`);
      await stop;
    }
  } finally {
    await server.close();
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
  }
  return 0;
}
