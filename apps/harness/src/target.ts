import { readFileSync } from 'node:fs';
import { Environment, type NoisePublicKey, parsePublicKeyJson, TetherError } from '@tether/client';
import { configPath, loadConfig, readApiKeyFile, selectContext } from './config.js';
import { connectRendezvous, type RendezvousConnector } from './reuse/client.js';

/** How the CLI reaches an environment: through the registry and relay, or an executor's WebSocket. */
export interface ConnectFlags {
  registry?: string;
  environmentId?: string;
  url?: string;
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

export const ENV = {
  registry: 'TETHER_REGISTRY_URL',
  environmentId: 'TETHER_ENVIRONMENT_ID',
  apiKey: 'TETHER_API_KEY',
  url: 'TETHER_EXECUTOR_URL',
  connectTimeout: 'TETHER_CONNECT_TIMEOUT',
  allowInsecureRegistry: 'TETHER_ALLOW_INSECURE_REGISTRY',
  executorKey: 'TETHER_EXECUTOR_KEY_FILE',
  apiKeyFile: 'TETHER_API_KEY_FILE',
  context: 'TETHER_CONTEXT',
  config: 'TETHER_CONFIG',
} as const;

/** A variable's value; an empty one counts as unset. */
function envValue(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const value = env[name];
  return value === undefined || value === '' ? undefined : value;
}

/** The flag, else `TETHER_ALLOW_INSECURE_REGISTRY=1` (or `true`). */
function allowInsecureRegistry(flags: ConnectFlags, env: NodeJS.ProcessEnv): boolean {
  if (flags.allowInsecureRegistry) return true;
  const value = env[ENV.allowInsecureRegistry]?.trim().toLowerCase();
  return value === '1' || value === 'true';
}

/** The executor key to pin from `--executor-key FILE` (or its variable): NoiseChannelPublicKey JSON. */
function pinnedExecutorKey(
  flags: ConnectFlags,
  env: NodeJS.ProcessEnv,
  fromContext: string | undefined,
): NoisePublicKey | undefined {
  const file = flags.executorKey ?? envValue(env, ENV.executorKey) ?? fromContext;
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

/** `--api-key-file`, else TETHER_API_KEY, else TETHER_API_KEY_FILE, else the context's api-key-file. */
function harnessApiKey(flags: ConnectFlags, env: NodeJS.ProcessEnv, fromContext: string | undefined): string {
  if (flags.apiKeyFile !== undefined) return readApiKeyFile(flags.apiKeyFile);
  const value = env[ENV.apiKey]?.trim();
  if (value) return value;
  const file = envValue(env, ENV.apiKeyFile) ?? fromContext;
  if (file !== undefined) return readApiKeyFile(file);
  throw new TetherError(
    'invalid_argument',
    `no API key: set ${ENV.apiKey}, pass --api-key-file FILE, or give the context an api-key-file (harness config set-context)`,
  );
}

/** How long to keep trying to connect (ms): the flag, else the variable, else the SDK's default (20 s). */
function connectRetry(flags: ConnectFlags, env: NodeJS.ProcessEnv): { timeoutMs: number } | undefined {
  const fromEnv = env[ENV.connectTimeout];
  const seconds = flags.connectTimeout ?? (fromEnv === undefined || fromEnv === '' ? undefined : Number(fromEnv));
  if (seconds === undefined) return undefined;
  if (!Number.isFinite(seconds) || seconds <= 0 || seconds > 3600) {
    throw new TetherError('invalid_argument', `${ENV.connectTimeout} must be seconds between 0 and 3600`);
  }
  return { timeoutMs: Math.round(seconds * 1000) };
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

/** The registry, harness API key and environment, resolved as for `harness exec` (for `harness login --web`). */
export function resolveRegistryAccess(
  flags: ConnectFlags,
  env: NodeJS.ProcessEnv,
  environmentId?: string,
): RegistryAccess {
  const file = configPath(env);
  const context =
    selectContext(loadConfig(file), flags.context ?? envValue(env, ENV.context), file, env)?.context ?? {};
  const registryUrl = flags.registry ?? envValue(env, ENV.registry) ?? context.registry;
  const id = environmentId ?? flags.environmentId ?? envValue(env, ENV.environmentId) ?? context.environment;
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
    allowInsecureRegistry: allowInsecureRegistry(flags, env),
  };
}

/** Opens the environment named by flags/env vars (remote), or `environmentId` from an `ENV:PATH`. */
export async function openEnvironment(
  flags: ConnectFlags,
  env: NodeJS.ProcessEnv,
  environmentId?: string,
  /** Connects the resolved rendezvous options: by default through a connection master where allowed. */
  connect: RendezvousConnector = connectRendezvous,
): Promise<Environment> {
  // `--url` on the command line also serves ENV:/path locations (the one executor it names); the variable
  // serves only commands without a location, so a stray TETHER_EXECUTOR_URL never redirects a copy.
  // Each setting: the flag, else its variable, else the context (--context, TETHER_CONTEXT, or the config
  // file's current-context), else the default.
  const file = configPath(env);
  const context =
    selectContext(loadConfig(file), flags.context ?? envValue(env, ENV.context), file, env)?.context ?? {};
  const url = flags.url ?? (environmentId ? undefined : (envValue(env, ENV.url) ?? context.url));
  const retry = connectRetry(flags, env);
  const common = { clientName: 'tether-harness', ...(retry ? { connectRetry: retry } : {}) };
  if (url) return Environment.connectWebSocket(url, common);
  const registryUrl = flags.registry ?? envValue(env, ENV.registry) ?? context.registry;
  const id = environmentId ?? flags.environmentId ?? envValue(env, ENV.environmentId) ?? context.environment;
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
  const executorPublicKey = pinnedExecutorKey(flags, env, context.executorKey);
  return connect(
    {
      registryUrl,
      apiKey,
      environmentId: id,
      allowInsecureRegistry: allowInsecureRegistry(flags, env),
      ...(executorPublicKey ? { executorPublicKey } : {}),
      ...common,
    },
    env,
  );
}
