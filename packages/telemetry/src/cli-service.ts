/**
 * What the service CLIs, the registry and the relay, are built of alike: the io they run with, a program of
 * the flag scheme whose `serve` command takes `--listen` and the log flags, and main.ts's hook-up to the
 * process (SIGTERM/SIGINT stop the server, the exit code, a prompt exit).
 */
import { type Command, Option } from 'commander';
import { type EnvScheme, LOG_FORMAT_ALIAS, type LogFormat, logOptions, SchemeCommand } from './cli-env.js';
import {
  type BareUnit,
  durationArg,
  formatDuration,
  type ListenAddress,
  parseListenAddress,
  positiveInteger,
} from './cli-values.js';
import { serviceTelemetryOptions, TelemetryConfigError } from './env.js';
import type { Logger } from './logger.js';
import type { TelemetryOptions } from './options.js';

/** What a service CLI runs with: main.ts hands it the process's own. */
export interface ServiceIo {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
  env: NodeJS.ProcessEnv;
  /** Resolves when the server should stop (SIGTERM/SIGINT in runServiceMain). */
  stopSignal: Promise<unknown>;
}

/** What every service's `serve` is given besides its own options. */
export interface ServiceServeOptions {
  listen: ListenAddress;
  logLevel: string;
  logFormat: LogFormat;
}

/** A service's CLI: `exit` receives each action's exit code. */
export type ServiceCli = (io: ServiceIo, exit: (code: number) => void) => Command;

export interface ServiceProgramSpec<O> {
  /** The app's flag scheme; its `app` names the program. The program adds TETHER_LOG_FORMAT, read for its log flags. */
  scheme: EnvScheme;
  /** What --version prints (packageVersion of the app). */
  version: string;
  description: string;
  serve: {
    description: string;
    /** `--listen`: the URL scheme the server prints once bound, and the default port on 127.0.0.1. */
    listen: { scheme: 'ws' | 'http'; port: number };
    /** serve's own options, in --help's order, between --listen and the log flags. */
    options: readonly Option[];
    /** Help shown after the options. */
    helpAfter: string;
    /** Serves until io.stopSignal; the exit code. */
    run: (options: O) => Promise<number>;
  };
}

/**
 * The program: the app's flag scheme, --version, a usage error followed by help, output to io; and its
 * `serve` command with --listen, the spec's options and --log-level/--log-format. Other commands the caller
 * adds to the program.
 */
export function serviceProgram<O>(
  spec: ServiceProgramSpec<O>,
  io: ServiceIo,
  exit: (code: number) => void,
): SchemeCommand {
  const deprecatedVariables = { ...spec.scheme.deprecatedVariables, '--log-format': [LOG_FORMAT_ALIAS] };
  const program = new SchemeCommand(spec.scheme.app, { ...spec.scheme, deprecatedVariables }, { env: io.env })
    .description(spec.description)
    .version(spec.version)
    .showHelpAfterError()
    .configureOutput({ writeOut: (t) => io.stdout.write(t), writeErr: (t) => io.stderr.write(t) });
  const { scheme, port } = spec.serve.listen;
  const serve = program
    .command('serve')
    .description(spec.serve.description)
    .addOption(
      new Option('--listen <address>', `address to listen on: HOST:PORT or ${scheme}://HOST:PORT (port 0 picks one)`)
        .argParser((value) => parseListenAddress(value, scheme))
        .default({ host: '127.0.0.1', port }, `127.0.0.1:${port}`),
    );
  for (const option of [...spec.serve.options, ...logOptions()]) serve.addOption(option);
  serve.addHelpText('after', spec.serve.helpAfter);
  serve.action(async (options: O) => exit(await spec.serve.run(options)));
  return program;
}

/** A `--NAME <duration>` option in ms (a bare number is in `bare`); --help shows the default with its unit. */
export function durationOption(flag: string, description: string, defaultMs: number, bare: BareUnit): Option {
  return new Option(`${flag} <duration>`, description)
    .argParser(durationArg({ bare }))
    .default(defaultMs, formatDuration(defaultMs));
}

/** A `--NAME <n>` option: a positive integer. */
export function countOption(flag: string, description: string, defaultValue: number): Option {
  return new Option(`${flag} <n>`, description).argParser(positiveInteger).default(defaultValue);
}

/**
 * `serve`'s telemetry, `tether-APP`'s, as the OTEL_* variables in io.env say, an export failure logged as a
 * warning. An unusable variable is a usage error: `APP: …` on stderr and undefined (the caller exits 2).
 */
export function serviceTelemetry(app: string, io: ServiceIo, log: Logger): TelemetryOptions | undefined {
  try {
    return serviceTelemetryOptions(io.env, {
      serviceName: `tether-${app}`,
      onError: (err) => log.warn({ err: err.message }, 'metrics export failed'),
    });
  } catch (err) {
    if (err instanceof TelemetryConfigError) {
      io.stderr.write(`${app}: ${err.message}\n`);
      return undefined;
    }
    throw err;
  }
}

/**
 * A service's main.ts: runs its CLI on process.argv with the process's streams and environment, stopping the
 * server on SIGTERM or SIGINT; exits with the code the CLI gave, or 1 with a line on stderr if it threw.
 */
export async function runServiceMain(app: string, buildCli: ServiceCli): Promise<void> {
  const stopSignal = new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  const io = { stdout: process.stdout, stderr: process.stderr, env: process.env, stopSignal };
  try {
    await buildCli(io, (code) => {
      process.exitCode = code;
    }).parseAsync(process.argv);
  } catch (err) {
    process.stderr.write(`${app}: ${(err as Error).message}\n`);
    process.exitCode = 1;
  }
  // Nothing else keeps the process alive once the server is closed; exit promptly either way.
  process.exit();
}
