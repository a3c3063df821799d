import { existsSync, readFileSync } from 'node:fs';
import { isIP, isIPv4 } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { loadOrCreateSigningKey, type SigningKey, signingKeyFromPem } from '@tether/relay-auth';
import { createLogger, DEFAULT_REDACT_PATHS, type Logger } from '@tether/telemetry';
import {
  countOption,
  durationOption,
  type EnvScheme,
  listArg,
  packageVersion,
  type ServiceIo,
  type ServiceServeOptions,
  serviceProgram,
  serviceTelemetry,
} from '@tether/telemetry/cli';
import { type Command, InvalidArgumentError, Option } from 'commander';
import { buildRegistry, SERVER_LIMIT_DEFAULTS } from './app.js';
import { RATE_LIMIT_DEFAULTS } from './plugins/rate-limit.js';
import { defaultUiDir } from './routes/ui.js';
import { openStore, ROLES, type Role } from './store/index.js';
import { ENVIRONMENT_ID_PATTERN, generateToken, hashToken } from './tokens.js';

/** `serve`'s options; durations in ms. */
export interface ServeOptions extends ServiceServeOptions {
  database: string;
  dataDir?: string;
  relayUrl: string[];
  signingKeyFile?: string;
  authorizationTtl: number;
  connectionTimeout: number;
  requestTimeout: number;
  headersTimeout: number;
  keepAliveTimeout: number;
  maxConnections: number;
  rateLimitUnauthenticated: number;
  rateLimitPerKey: number;
  trustProxy: string[];
  uiDir?: string;
  ui: boolean;
  uiOrigin: string[];
  browserSessionTtl: number;
}

/** The registry's flags and their variables (`TETHER_REGISTRY_<FLAG>`; README "Flags and variables"). */
export const REGISTRY_ENV: EnvScheme = {
  app: 'registry',
  deprecatedVariables: { '--relay-url': ['TETHER_REGISTRY_RELAY_URLS'] },
  withoutVariables: {
    'keys create --role': 'one key per run: an argument',
    'keys create --environments': 'one key per run: an argument',
    'keys create --access': 'one key per run: an argument',
    'keys create --relay-url': "one key per run (serve's --relay-url variable must not leak into it)",
    'keys create --label': 'one key per run: an argument',
  },
};

const DEFAULT_RELAY = 'ws://127.0.0.1:8081';

/** Never logged: the defaults (authorization, token, …) and browser grants (routes/browser.ts logs neither). */
export const REGISTRY_REDACT: readonly string[] = [...DEFAULT_REDACT_PATHS, 'grant', '*.grant'];

function databaseUrl(value: string): string {
  if (!value.startsWith('sqlite:') && !/^postgres(ql)?:\/\//.test(value)) {
    throw new InvalidArgumentError('expected sqlite:PATH or postgres://…');
  }
  return value;
}

/** `--relay-url`: ws:// or wss:// URLs, repeatable or comma-separated. */
const relayUrl = listArg((url) => {
  if (!/^wss?:\/\/[^\s]+$/.test(url)) throw new InvalidArgumentError(`not a ws:// or wss:// URL: ${url}`);
});

/** `--trust-proxy`: IPs or CIDR blocks (checked by Fastify's proxy-addr when the app is built). */
const trustProxyEntries = listArg((entry) => {
  const [ip = '', bits, extra] = entry.split('/');
  const max = isIPv4(ip) ? 32 : 128;
  if (!isIP(ip) || extra !== undefined || (bits !== undefined && !(/^\d{1,3}$/.test(bits) && Number(bits) <= max))) {
    throw new InvalidArgumentError(`not an IP address or CIDR block: ${JSON.stringify(entry)}`);
  }
});

/** `--ui-origin`: an exact `http(s)://host[:port]` origin (no path), as a browser sends it in `Origin`. */
const uiOrigin = listArg((origin) => {
  let parsed: URL | null = null;
  try {
    parsed = new URL(origin);
  } catch {
    // reported below
  }
  if (!parsed || !/^https?:$/.test(parsed.protocol) || parsed.origin !== origin) {
    throw new InvalidArgumentError(`not an origin (http(s)://host[:port], no path or trailing slash): ${origin}`);
  }
});

/** A relay key's node URL: exactly as the relay announces it (`--public-url`) and the registry routes to it. */
function nodeUrl(value: string): string {
  if (!/^wss?:\/\/[^\s,]+$/.test(value)) throw new InvalidArgumentError(`not a ws:// or wss:// URL: ${value}`);
  return value;
}

function role(value: string): Role {
  if (!(ROLES as readonly string[]).includes(value)) throw new InvalidArgumentError(`one of ${ROLES.join(', ')}`);
  return value as Role;
}

/** A `--NAME <duration>` flag (500ms, 30s, 5m, 1h; a bare number is seconds), in ms. */
const duration = (flag: string, description: string, defaultMs: number) =>
  durationOption(flag, description, defaultMs, 's');

const databaseOption = () =>
  new Option('--database <url>', 'sqlite:PATH or postgres://…').argParser(databaseUrl).makeOptionMandatory();

/** `serve`'s options after --listen, in --help's order. */
const serveOptions = (): Option[] => [
  databaseOption(),
  new Option('--data-dir <dir>', 'where the relay signing key lives (default: beside the SQLite file)'),
  new Option('--relay-url <url>', 'relay node URL, repeatable or comma-separated')
    .argParser(relayUrl)
    .default([], DEFAULT_RELAY),
  new Option('--signing-key-file <path>', 'Ed25519 PKCS#8 PEM to sign relay URLs with (shared by replicas)'),
  duration('--authorization-ttl', 'lifetime of a harness authorization', 60_000),
  duration('--connection-timeout', 'close a socket idle this long', SERVER_LIMIT_DEFAULTS.connectionTimeoutMs),
  duration('--request-timeout', 'a request must arrive in full within this', SERVER_LIMIT_DEFAULTS.requestTimeoutMs),
  duration(
    '--headers-timeout',
    "a request's headers must arrive within this (cuts slow clients)",
    SERVER_LIMIT_DEFAULTS.headersTimeoutMs,
  ),
  duration(
    '--keep-alive-timeout',
    'close an idle keep-alive connection after this',
    SERVER_LIMIT_DEFAULTS.keepAliveTimeoutMs,
  ),
  countOption(
    '--max-connections',
    'refuse connections beyond this many open at once',
    SERVER_LIMIT_DEFAULTS.maxConnections,
  ),
  countOption(
    '--rate-limit-unauthenticated',
    'requests per minute from one client address without an API key (see --trust-proxy); then 429',
    RATE_LIMIT_DEFAULTS.unauthenticated,
  ),
  countOption(
    '--rate-limit-per-key',
    'requests per minute with one API key, from any address; then 429',
    RATE_LIMIT_DEFAULTS.perKey,
  ),
  new Option(
    '--trust-proxy <cidr>',
    'take the client address (request logs, rate limits) from X-Forwarded-For, and the scheme and host of browser-grant ' +
      'links from X-Forwarded-Proto/Host, only when the peer is in one of these IPs or CIDR blocks; ' +
      'repeatable or comma-separated',
  )
    .argParser(trustProxyEntries)
    .default([], 'none'),
  new Option(
    '--ui-dir <dir>',
    'directory of the browser UI served under /ui (default: the dist directory of the @tether/web package)',
  ),
  new Option('--no-ui', 'do not serve the browser UI under /ui'),
  new Option(
    '--ui-origin <origin>',
    'origin of a browser UI hosted elsewhere that may call /connect and the grant exchange (CORS); ' +
      'repeatable or comma-separated',
  )
    .argParser(uiOrigin)
    .default([], 'none'),
  duration(
    '--browser-session-ttl',
    'lifetime of a browser session (a browser grant exchanged; it may call /connect on its one environment)',
    3600_000,
  ),
];

/** The data directory: explicit, else next to a SQLite database, else ./registry-data. */
function dataDirFor(options: ServeOptions): string {
  if (options.dataDir) return resolve(options.dataDir);
  if (options.database.startsWith('sqlite:') && options.database !== 'sqlite::memory:') {
    return dirname(resolve(options.database.slice('sqlite:'.length)));
  }
  return resolve('registry-data');
}

/** Runs `registry serve` until io.stopSignal; returns the exit code. */
export async function runServe(options: ServeOptions, io: ServiceIo, logger?: Logger): Promise<number> {
  const log =
    logger ??
    createLogger({
      component: 'registry',
      level: options.logLevel,
      format: options.logFormat,
      redact: REGISTRY_REDACT,
    });
  let signingKey: SigningKey;
  try {
    signingKey = options.signingKeyFile
      ? signingKeyFromPem(readFileSync(options.signingKeyFile, 'utf8'))
      : loadOrCreateSigningKey(dataDirFor(options));
  } catch (err) {
    io.stderr.write(`registry: cannot load the relay signing key: ${(err as Error).message}\n`);
    return 1;
  }
  const telemetry = serviceTelemetry('registry', io, log);
  if (!telemetry) return 2;
  let store: Awaited<ReturnType<typeof openStore>>;
  try {
    // SQLite: WAL checkpoints from a worker thread, off the request path.
    store = await openStore(options.database, { sqliteBackgroundCheckpointMs: 200 });
  } catch (err) {
    io.stderr.write(`registry: cannot open the database: ${(err as Error).message}\n`);
    return 1;
  }
  if (options.headersTimeout > options.requestTimeout) {
    io.stderr.write('registry: --headers-timeout must not exceed --request-timeout\n');
    await store.close();
    return 1;
  }
  let ui: { dir: string | null } | undefined;
  if (options.ui) {
    const dir = options.uiDir !== undefined ? resolve(options.uiDir) : defaultUiDir();
    if (options.uiDir !== undefined && !existsSync(join(dir as string, 'index.html'))) {
      io.stderr.write(`registry: --ui-dir ${options.uiDir} holds no index.html\n`);
      await store.close();
      return 1;
    }
    if (dir === null) log.warn('the browser UI is not served: no @tether/web build found (see --ui-dir)');
    ui = { dir };
  }
  const app = await buildRegistry(
    {
      relayUrls: options.relayUrl.length > 0 ? options.relayUrl : [DEFAULT_RELAY],
      ...(ui ? { ui } : {}),
      uiOrigins: options.uiOrigin,
      browserSessionTtlMs: options.browserSessionTtl,
      authorizationTtlMs: options.authorizationTtl,
      trustProxy: options.trustProxy,
      limits: {
        connectionTimeoutMs: options.connectionTimeout,
        requestTimeoutMs: options.requestTimeout,
        headersTimeoutMs: options.headersTimeout,
        keepAliveTimeoutMs: options.keepAliveTimeout,
        maxConnections: options.maxConnections,
      },
      rateLimit: { unauthenticated: options.rateLimitUnauthenticated, perKey: options.rateLimitPerKey },
    },
    { store, signingKey, logger: log, telemetry },
  );
  try {
    await app.listen({ host: options.listen.host, port: options.listen.port });
  } catch (err) {
    io.stderr.write(
      `registry: cannot listen on ${options.listen.host}:${options.listen.port}: ${(err as Error).message}\n`,
    );
    await app.close();
    await store.close();
    return 1;
  }
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : options.listen.port;
  const host = options.listen.host.includes(':') ? `[${options.listen.host}]` : options.listen.host;
  io.stdout.write(`http://${host}:${port}\n`);
  log.info({ port, engine: store.engine }, 'registry listening');
  await io.stopSignal;
  log.info('shutting down');
  await app.close();
  if (!(await app.drain(10_000))) log.warn('requests still in flight after 10 s; closing the store anyway');
  await store.close();
  return 0;
}

/** `registry` with `serve` and `keys create|list|revoke`; `exit` receives each action's exit code. */
export function buildCli(io: ServiceIo, exit: (code: number) => void): Command {
  const program = serviceProgram<ServeOptions>(
    {
      scheme: REGISTRY_ENV,
      version: packageVersion(import.meta.url, '@tether/registry'),
      description: 'Tether registry: environments, executor registrations, harness bundles and API keys.',
      serve: {
        description: 'serve the registry HTTP API (prints its bound URL on stdout, logs JSON on stderr)',
        listen: { scheme: 'http', port: 8080 },
        options: serveOptions(),
        helpAfter: `
Durations take a unit: 500ms, 30s, 5m, 1h; a bare number is seconds. Flags may also come before \`serve\`
(\`registry --database sqlite:r.db serve\`), as before any other command.`,
        run: (options) => runServe(options, io),
      },
    },
    io,
    exit,
  );

  const keys = program.command('keys').description('manage API keys (admin, against the same database)');

  keys
    .command('create')
    .description('create an API key and print its token once on stdout')
    .addOption(databaseOption())
    .addOption(new Option('--role <role>', 'executor, harness, admin or relay').argParser(role).makeOptionMandatory())
    .addOption(
      new Option(
        '--environments <glob>',
        "environment ids an executor or harness key may act on (* any run, ? one character; '*' for all); " +
          'default: none',
      ),
    )
    .addOption(
      new Option('--relay-url <url>', 'for --role relay (required): the node URL it may heartbeat for').argParser(
        nodeUrl,
      ),
    )
    .addOption(
      new Option(
        '--access <access>',
        'for --role harness: full (default) or view (its harnesses may only watch processes shared with them: no start, no input, no files)',
      ).choices(['full', 'view']),
    )
    .option('--label <text>', 'a note for `keys list`', '')
    .action(
      async (options: {
        database: string;
        role: Role;
        environments?: string;
        relayUrl?: string;
        access?: 'full' | 'view';
        label: string;
      }) => {
        if ((options.role === 'relay') !== (options.relayUrl !== undefined)) {
          io.stderr.write('registry: --relay-url is required for --role relay and accepted for no other role\n');
          return exit(2);
        }
        if (options.access !== undefined && options.role !== 'harness') {
          io.stderr.write('registry: --access is for --role harness keys only\n');
          return exit(2);
        }
        const scoped = options.role === 'executor' || options.role === 'harness';
        if (scoped && options.environments === undefined) {
          io.stderr.write(
            `registry: warning: no --environments given, so this ${options.role} key may act on no environment; ` +
              "pass --environments GLOB (or '*' for all)\n",
          );
        }
        const environments = options.environments ?? '';
        const store = await openStore(options.database);
        try {
          const token = generateToken();
          const id = `key_${hashToken(token).slice(0, 16)}`;
          await store.createApiKey({
            id,
            tokenHash: hashToken(token),
            role: options.role,
            environments,
            label: options.label,
            createdAt: Date.now(),
            relayUrl: options.relayUrl ?? null,
            access: options.access ?? 'full',
          });
          io.stdout.write(`${token}\n`);
          const scope = options.relayUrl ? `relay node ${options.relayUrl}` : `environments '${environments}'`;
          io.stderr.write(`registry: created ${options.role} key ${id} for ${scope}\n`);
        } finally {
          await store.close();
        }
        exit(0);
      },
    );

  keys
    .command('list')
    .description('list API keys, one JSON object per line (tokens are never shown)')
    .addOption(databaseOption())
    .action(async (options: { database: string }) => {
      const store = await openStore(options.database);
      try {
        for (const key of await store.listApiKeys()) io.stdout.write(`${JSON.stringify(key)}\n`);
      } finally {
        await store.close();
      }
      exit(0);
    });

  keys
    .command('revoke')
    .description(
      'revoke an API key by id, and with it every current registration made with it (a running `registry serve` ' +
        'pushes those to its relays within seconds; relays also learn them from their next heartbeat)',
    )
    .argument('<id>', 'key id from `keys list`')
    .addOption(databaseOption())
    .action(async (id: string, options: { database: string }) => {
      const store = await openStore(options.database);
      let revoked: Awaited<ReturnType<typeof store.revokeApiKey>>;
      try {
        revoked = await store.revokeApiKey(id, Date.now());
      } finally {
        await store.close();
      }
      if (!revoked) {
        io.stderr.write(`registry: no active key ${id}\n`);
        return exit(1);
      }
      io.stderr.write(`registry: revoked ${id} and ${revoked.registrations.length} registration(s) made with it\n`);
      for (const r of revoked.registrations) {
        io.stdout.write(`${JSON.stringify({ environment_id: r.environmentId, registration_id: r.registrationId })}\n`);
      }
      exit(0);
    });

  const environments = program
    .command('environments')
    .description('manage environments (admin, against the same database)');

  environments
    .command('transfer')
    .description(
      'bind an environment (created if unknown) to another executor key: only that key may register it from now on',
    )
    .argument('<environment>', 'environment id')
    .argument('<key-id>', 'an active executor key id from `keys list`')
    .addOption(databaseOption())
    .action(async (environmentId: string, keyId: string, options: { database: string }) => {
      if (!new RegExp(ENVIRONMENT_ID_PATTERN).test(environmentId)) {
        io.stderr.write('registry: environment ids are 1-128 ASCII letters, digits, - or _\n');
        return exit(2);
      }
      const store = await openStore(options.database);
      let done: boolean;
      try {
        done = await store.setEnvironmentOwner(environmentId, keyId, Date.now());
      } finally {
        await store.close();
      }
      io.stderr.write(
        done
          ? `registry: environment ${environmentId} is now bound to ${keyId}\n`
          : `registry: ${keyId} is not an active executor key\n`,
      );
      exit(done ? 0 : 1);
    });

  return program;
}
