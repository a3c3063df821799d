import { readFileSync } from 'node:fs';
import { Environment, type NoisePublicKey, parsePublicKeyJson, TetherError } from '@tether/client';
import { configPath, loadConfig, readApiKeyFile, selectContext } from './config.js';
import { connectRendezvous, type RendezvousConnector } from './reuse/client.js';

/** How the CLI reaches an environment: through the registry and relay, or an executor's WebSocket. */
export interface ConnectFlags {
  registry?: string;
  environmentId?: string;
  url?: string;
  /** `--url` came from its variable, not the command line: it then serves only commands without a location. */
  urlFromVariable?: boolean;
  /** Seconds; see `--connect-timeout`. */
  connectTimeout?: number;
  /** `--allow-insecure-registry`: a plain http:// registry that is not on loopback. */
  allowInsecureRegistry?: boolean;
  /** `--executor-key FILE`: the executor public key (JSON) to pin for the session. */
  executorKey?: string;
  /** `--context NAME`: the config file's context to use instead of its current one. */
  context?: string;
  /** `--api-key-file FILE`: read the harness API key from this file (0600, like an ssh key). */
  apiKeyFile?: string;
}

/**
 * The variables of the flags here are the scheme's (`TETHER_HARNESS_<FLAG>`, read by the program with the
 * flags: cli.ts), so a flag's value in ConnectFlags may come from its variable. These are the harness's own.
 */
export const ENV = {
  /** The harness API key itself (no flag: a key on a command line would be in every `ps`). */
  apiKey: 'TETHER_HARNESS_API_KEY',
  registry: 'TETHER_HARNESS_REGISTRY',
  environmentId: 'TETHER_HARNESS_ENVIRONMENT_ID',
  url: 'TETHER_HARNESS_URL',
  context: 'TETHER_HARNESS_CONTEXT',
  config: 'TETHER_CONFIG',
} as const;

/**
 * The older names, still read for one more release with a warning naming the new one (the flags' by the
 * program, the key's by the program's preAction hook and harnessApiKey here).
 */
export const DEPRECATED_ENV = {
  registry: 'TETHER_REGISTRY_URL',
  environmentId: 'TETHER_ENVIRONMENT_ID',
  apiKey: 'TETHER_API_KEY',
  url: 'TETHER_EXECUTOR_URL',
  connectTimeout: 'TETHER_CONNECT_TIMEOUT',
  allowInsecureRegistry: 'TETHER_ALLOW_INSECURE_REGISTRY',
  executorKey: 'TETHER_EXECUTOR_KEY_FILE',
  apiKeyFile: 'TETHER_API_KEY_FILE',
  context: 'TETHER_CONTEXT',
} as const;

/** The executor key to pin from `--executor-key FILE` (or its variable): NoiseChannelPublicKey JSON. */
function pinnedExecutorKey(flags: ConnectFlags, fromContext: string | undefined): NoisePublicKey | undefined {
  const file = flags.executorKey ?? fromContext;
  if (file === undefined) return undefined;
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new TetherError('invalid_argument', `cannot read the executor key ${file}: ${(err as Error).message}`);
  }
  try {
    return parsePublicKeyJson(text);
  } catch (err) {
    throw new TetherError('invalid_argument', `${file} is not an executor public key: ${(err as Error).message}`);
  }
}

/**
 * `--api-key-file` (or its variable), else TETHER_HARNESS_API_KEY, else the deprecated TETHER_API_KEY (the
 * program warns), else the context's api-key-file.
 */
function harnessApiKey(flags: ConnectFlags, env: NodeJS.ProcessEnv, fromContext: string | undefined): string {
  if (flags.apiKeyFile !== undefined) return readApiKeyFile(flags.apiKeyFile);
  const value = env[ENV.apiKey]?.trim() || env[DEPRECATED_ENV.apiKey]?.trim();
  if (value) return value;
  if (fromContext !== undefined) return readApiKeyFile(fromContext);
  throw new TetherError(
    'invalid_argument',
    `no API key: set ${ENV.apiKey}, pass --api-key-file FILE, or give the context an api-key-file (harness config set-context)`,
  );
}

/** How long to keep trying to connect (ms): the flag (or its variable), else the SDK's default (20 s). */
function connectRetry(flags: ConnectFlags): { timeoutMs: number } | undefined {
  return flags.connectTimeout === undefined ? undefined : { timeoutMs: Math.round(flags.connectTimeout * 1000) };
}

/** `ENV:PATH` (remote) or a local path. A single letter before `:` is not an environment (C:\ on Windows). */
export type Location = { kind: 'local'; path: string } | { kind: 'remote'; environmentId: string; path: string };

export function parseLocation(text: string): Location {
  const match = /^([A-Za-z0-9_-]{2,128}):(.*)$/.exec(text);
  if (!match) return { kind: 'local', path: text };
  const [, environmentId = '', path = ''] = match;
  if (!path.startsWith('/')) {
    throw new TetherError('invalid_argument', `remote path in ${JSON.stringify(text)} must be absolute (ENV:/path)`);
  }
  return { kind: 'remote', environmentId, path };
}

/** A registry call's target: as `openEnvironment` resolves it (flag, else variable, else context). */
export interface RegistryAccess {
  registryUrl: string;
  apiKey: string;
  environmentId: string;
  allowInsecureRegistry: boolean;
}

/** The config file's context the flags select (--context or its variable, else the file's current-context), or none. */
function contextOf(flags: ConnectFlags, env: NodeJS.ProcessEnv) {
  const file = configPath(env);
  return selectContext(loadConfig(file), flags.context, file, env)?.context ?? {};
}

/** The registry, harness API key and environment, resolved as for `harness exec` (for `harness login --web`). */
export function resolveRegistryAccess(
  flags: ConnectFlags,
  env: NodeJS.ProcessEnv,
  environmentId?: string,
): RegistryAccess {
  const context = contextOf(flags, env);
  const registryUrl = flags.registry ?? context.registry;
  const id = environmentId ?? flags.environmentId ?? context.environment;
  if (!registryUrl) {
    throw new TetherError(
      'invalid_argument',
      `no registry: pass --registry URL, set ${ENV.registry}, or use a context (harness config set-context NAME --registry URL)`,
    );
  }
  if (!id) {
    throw new TetherError(
      'invalid_argument',
      `no environment: pass --environment-id ID, set ${ENV.environmentId}, or give the context an environment`,
    );
  }
  return {
    registryUrl,
    apiKey: harnessApiKey(flags, env, context.apiKeyFile),
    environmentId: id,
    allowInsecureRegistry: flags.allowInsecureRegistry === true,
  };
}

/**
 * The executor URL `openEnvironment` dials directly, if any: `--url` on the command line also serves ENV:/path
 * locations (the one executor it names); from its variable it serves only commands without a location, so a stray
 * TETHER_HARNESS_URL never redirects a copy.
 */
function directUrl(flags: ConnectFlags, contextUrl: string | undefined, environmentId?: string): string | undefined {
  const fromCommandLine = flags.urlFromVariable ? undefined : flags.url;
  return (
    fromCommandLine ?? (environmentId ? undefined : ((flags.urlFromVariable ? flags.url : undefined) ?? contextUrl))
  );
}

/** Whether `openEnvironment` goes through a registry (a rendezvous), not straight to an executor's `--url`. */
export function throughRegistry(flags: ConnectFlags, env: NodeJS.ProcessEnv): boolean {
  const context = contextOf(flags, env);
  return directUrl(flags, context.url) === undefined;
}

/**
 * Where `openEnvironment` connects, for a message: `environment ID`, or `the executor at URL` for `--url`. Called
 * once it connected (its settings are then known to resolve).
 */
export function targetName(flags: ConnectFlags, env: NodeJS.ProcessEnv, environmentId?: string): string {
  const context = contextOf(flags, env);
  const url = directUrl(flags, context.url, environmentId);
  return url ? `the executor at ${url}` : `environment ${environmentId ?? flags.environmentId ?? context.environment}`;
}

/** Opens the environment named by flags/env vars (remote), or `environmentId` from an `ENV:PATH`. */
export async function openEnvironment(
  flags: ConnectFlags,
  env: NodeJS.ProcessEnv,
  environmentId?: string,
  /** Connects the resolved rendezvous options: by default through a connection master where allowed. */
  connect: RendezvousConnector = connectRendezvous,
): Promise<Environment> {
  // Each setting: the flag, else its variable, else the context, else the default. `--url` as directUrl says.
  const context = contextOf(flags, env);
  const url = directUrl(flags, context.url, environmentId);
  const retry = connectRetry(flags);
  const common = { clientName: 'tether-harness', ...(retry ? { connectRetry: retry } : {}) };
  if (url) return Environment.connectWebSocket(url, common);
  const registryUrl = flags.registry ?? context.registry;
  const id = environmentId ?? flags.environmentId ?? context.environment;
  if (!registryUrl) {
    throw new TetherError(
      'invalid_argument',
      `no registry: pass --registry URL, set ${ENV.registry}, or use a context (harness config set-context NAME --registry URL); --url reaches an executor directly`,
    );
  }
  if (!id)
    throw new TetherError(
      'invalid_argument',
      `no environment: pass --environment-id ID, set ${ENV.environmentId}, or give the context an environment`,
    );
  const apiKey = harnessApiKey(flags, env, context.apiKeyFile);
  const executorPublicKey = pinnedExecutorKey(flags, context.executorKey);
  return connect(
    {
      registryUrl,
      apiKey,
      environmentId: id,
      allowInsecureRegistry: flags.allowInsecureRegistry === true,
      ...(executorPublicKey ? { executorPublicKey } : {}),
      ...common,
    },
    env,
  );
}
