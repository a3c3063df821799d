import {
  type Deprecations,
  type EnvScheme,
  LOG_FORMAT_ALIAS,
  type LogFormat,
  type LogLevel,
  logOptions,
  packageVersion,
  SchemeCommand,
} from '@tether/telemetry/cli';
import { type Command, InvalidArgumentError, Option } from 'commander';
import { API_KEY_ENV, API_KEY_FILE_ENV, CODEX_API_KEY_ENV, DEPRECATED_API_KEY_ENV } from './api-key.js';
import { EXECUTOR_DESCRIPTION, EXECUTOR_HELP } from './cli-help.js';
import { defaultConfigPath } from './config.js';
import { DEFAULT_LISTEN_URL, type ListenTarget, ListenUrlError, parseListenUrl } from './listen-url.js';
import { checkEnvironmentId, parseRegistryUrl } from './remote/registry-client.js';
import { ForwardPolicy, ForwardPolicyError } from './tcp/policy.js';

/**
 * The executor's command line: its flags, their variables and the values they parse to (`ExecutorOptions`).
 * What they mean together is checked in cli-checks.ts; what the help says after the flags is in cli-help.ts.
 */

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

function absolutePath(value: string): string {
  if (!value.startsWith('/')) throw new InvalidArgumentError('expected an absolute path');
  return value;
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
  /** `--record-dir`, `--record-failure` (over the config's `[recording]`). */
  recordDir?: string;
  recordFailure?: 'open' | 'closed';
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

export function buildCommand(
  run: (options: ExecutorOptions) => Promise<void>,
  env: NodeJS.ProcessEnv = process.env,
): Command {
  const command = new SchemeCommand('executor', EXECUTOR_ENV, { env });
  // Said by runExecutor after the key's handover, which re-executes the executor (and so parses again).
  command.deprecations.hold();
  command
    .description(EXECUTOR_DESCRIPTION)
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
    .option(
      '--record-dir <dir>',
      'record every process session (PTY and pipes) in this directory as signed asciicast v2 files, mode 0600; the recording key is made there on first use and its public half printed (default from config [recording] dir, else none)',
      absolutePath,
    )
    .addOption(
      new Option(
        '--record-failure <policy>',
        'when a recording cannot be written or keep up: open (the process goes on, unrecorded or with a gap noted) or closed (the process is ended, and a start whose recording cannot be opened is refused); default from config, else open',
      ).choices(['open', 'closed']),
    )
    .option('--config <path>', `TOML config file (default: ${defaultConfigPath()}, i.e. $TETHER_HOME/config.toml)`)
    .option('--strict-config', 'fail on unknown or invalid config keys instead of ignoring them', false);
  for (const option of logOptions(undefined)) command.addOption(option);
  return command.addHelpText('after', EXECUTOR_HELP).action(async (options: ExecutorOptions, self: Command) => {
    // The stdin switch's variable means something only with --registry; without it, it was always ignored.
    if (self.getOptionValueSource('exitOnStdinClose') === 'env' && options.registry === undefined) {
      delete options.exitOnStdinClose;
    }
    return run({ ...options, deprecations: command.deprecations });
  });
}
