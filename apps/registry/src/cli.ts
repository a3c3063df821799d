import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { loadOrCreateSigningKey, type SigningKey, signingKeyFromPem } from '@tether/relay-auth';
import { Command, InvalidArgumentError, Option } from 'commander';
import pino, { type Logger } from 'pino';
import { buildRegistry } from './app.js';
import { openStore, ROLES, type Role } from './store/index.js';
import { generateToken, hashToken } from './tokens.js';

export interface CliIo {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
  env: NodeJS.ProcessEnv;
  /** Resolves when the server should stop (SIGTERM/SIGINT in main.ts). */
  stopSignal: Promise<unknown>;
}

export interface ServeOptions {
  listen: { host: string; port: number };
  database: string;
  dataDir?: string;
  relayUrl: string[];
  signingKeyFile?: string;
  authorizationTtl: number;
  logLevel: string;
}

const DEFAULT_RELAY = 'ws://127.0.0.1:8081';

function listenAddress(value: string): { host: string; port: number } {
  const match = /^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/.exec(value);
  const port = Number(match?.[2]);
  if (!match || port > 65_535) throw new InvalidArgumentError('expected HOST:PORT (port 0 picks a free one)');
  return { host: (match[1] as string).replace(/^\[|\]$/g, ''), port };
}

function databaseUrl(value: string): string {
  if (!value.startsWith('sqlite:') && !/^postgres(ql)?:\/\//.test(value)) {
    throw new InvalidArgumentError('expected sqlite:PATH or postgres://…');
  }
  return value;
}

function relayUrl(value: string, previous: string[] | undefined): string[] {
  const urls = value.split(',').filter((u) => u !== '');
  for (const url of urls) {
    if (!/^wss?:\/\/[^\s]+$/.test(url)) throw new InvalidArgumentError(`not a ws:// or wss:// URL: ${url}`);
  }
  return [...(previous ?? []), ...urls];
}

function positiveSeconds(value: string): number {
  if (!/^\d+$/.test(value) || Number(value) < 1) throw new InvalidArgumentError('expected a positive integer');
  return Number(value);
}

function role(value: string): Role {
  if (!(ROLES as readonly string[]).includes(value)) throw new InvalidArgumentError(`one of ${ROLES.join(', ')}`);
  return value as Role;
}

const databaseOption = () =>
  new Option('--database <url>', 'sqlite:PATH or postgres://…')
    .env('TETHER_REGISTRY_DATABASE')
    .argParser(databaseUrl)
    .makeOptionMandatory();

/** The data directory: explicit, else next to a SQLite database, else ./registry-data. */
function dataDirFor(options: ServeOptions): string {
  if (options.dataDir) return resolve(options.dataDir);
  if (options.database.startsWith('sqlite:') && options.database !== 'sqlite::memory:') {
    return dirname(resolve(options.database.slice('sqlite:'.length)));
  }
  return resolve('registry-data');
}

/** Runs `registry serve` until io.stopSignal; returns the exit code. */
export async function runServe(options: ServeOptions, io: CliIo, logger?: Logger): Promise<number> {
  const log = logger ?? pino({ level: options.logLevel, base: { service: 'registry' } }, pino.destination(2));
  let signingKey: SigningKey;
  try {
    signingKey = options.signingKeyFile
      ? signingKeyFromPem(readFileSync(options.signingKeyFile, 'utf8'))
      : loadOrCreateSigningKey(dataDirFor(options));
  } catch (err) {
    io.stderr.write(`registry: cannot load the relay signing key: ${(err as Error).message}\n`);
    return 1;
  }
  let store: Awaited<ReturnType<typeof openStore>>;
  try {
    // SQLite: WAL checkpoints from a worker thread, off the request path.
    store = await openStore(options.database, { sqliteBackgroundCheckpointMs: 200 });
  } catch (err) {
    io.stderr.write(`registry: cannot open the database: ${(err as Error).message}\n`);
    return 1;
  }
  const app = await buildRegistry(
    {
      relayUrls: options.relayUrl.length > 0 ? options.relayUrl : [DEFAULT_RELAY],
      authorizationTtlMs: options.authorizationTtl * 1000,
    },
    { store, signingKey, logger: log },
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
export function buildCli(io: CliIo, exit: (code: number) => void): Command {
  const program = new Command('registry')
    .description('Tether registry: environments, executor registrations, harness bundles and API keys.')
    .showHelpAfterError()
    .configureOutput({ writeOut: (t) => io.stdout.write(t), writeErr: (t) => io.stderr.write(t) });

  program
    .command('serve')
    .description('serve the registry HTTP API (prints its bound URL on stdout, logs JSON on stderr)')
    .addOption(
      new Option('--listen <host:port>', 'address to listen on (port 0 picks one)')
        .env('TETHER_REGISTRY_LISTEN')
        .argParser(listenAddress)
        .default({ host: '127.0.0.1', port: 8080 }, '127.0.0.1:8080'),
    )
    .addOption(databaseOption())
    .addOption(
      new Option('--data-dir <dir>', 'where the relay signing key lives (default: beside the SQLite file)').env(
        'TETHER_REGISTRY_DATA_DIR',
      ),
    )
    .addOption(
      new Option('--relay-url <url>', `relay node URL, repeatable or comma-separated (default ${DEFAULT_RELAY})`)
        .env('TETHER_REGISTRY_RELAY_URLS')
        .argParser(relayUrl)
        .default([]),
    )
    .addOption(
      new Option('--signing-key-file <path>', 'Ed25519 PKCS#8 PEM to sign relay URLs with (shared by replicas)').env(
        'TETHER_REGISTRY_SIGNING_KEY_FILE',
      ),
    )
    .addOption(
      new Option('--authorization-ttl <seconds>', 'lifetime of a harness authorization')
        .env('TETHER_REGISTRY_AUTHORIZATION_TTL')
        .argParser(positiveSeconds)
        .default(60),
    )
    .addOption(new Option('--log-level <level>', 'pino level').env('TETHER_REGISTRY_LOG_LEVEL').default('info'))
    .action(async (options: ServeOptions) => exit(await runServe(options, io)));

  const keys = program.command('keys').description('manage API keys (admin, against the same database)');

  keys
    .command('create')
    .description('create an API key and print its token once on stdout')
    .addOption(databaseOption())
    .addOption(new Option('--role <role>', 'executor, harness or admin').argParser(role).makeOptionMandatory())
    .addOption(new Option('--environments <glob>', 'environment ids the key may act on (* and ?)').default('*'))
    .option('--label <text>', 'a note for `keys list`', '')
    .action(async (options: { database: string; role: Role; environments: string; label: string }) => {
      const store = await openStore(options.database);
      try {
        const token = generateToken();
        const id = `key_${hashToken(token).slice(0, 16)}`;
        await store.createApiKey({
          id,
          tokenHash: hashToken(token),
          role: options.role,
          environments: options.environments,
          label: options.label,
          createdAt: Date.now(),
        });
        io.stdout.write(`${token}\n`);
        io.stderr.write(`registry: created ${options.role} key ${id} for environments '${options.environments}'\n`);
      } finally {
        await store.close();
      }
      exit(0);
    });

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
    .description('revoke an API key by id')
    .argument('<id>', 'key id from `keys list`')
    .addOption(databaseOption())
    .action(async (id: string, options: { database: string }) => {
      const store = await openStore(options.database);
      let revoked: boolean;
      try {
        revoked = await store.revokeApiKey(id, Date.now());
      } finally {
        await store.close();
      }
      io.stderr.write(revoked ? `registry: revoked ${id}\n` : `registry: no active key ${id}\n`);
      exit(revoked ? 0 : 1);
    });

  return program;
}
