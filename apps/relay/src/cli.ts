import type { KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { publicKeyFromPem } from '@tether/relay-auth';
import { createLogger, type Logger } from '@tether/telemetry';
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
import { createRelay } from './app.js';
import { TrustedProxies, TrustProxyError } from './client-address.js';
import { DEFAULT_LIMITS, type RelayLimits } from './limits.js';
import { PushSources } from './push-sources.js';

/** `serve`'s options: the limits by their flags' names (`--idle-timeout` → idleTimeout, in ms). */
export interface ServeOptions extends ServiceServeOptions, Partial<Record<LimitOption, number>> {
  publicUrl?: string;
  registry?: string;
  registryKeyFile?: string;
  registryToken?: string;
  /** Milliseconds. */
  heartbeatInterval: number;
  trustProxy: string[];
  /** IPs, CIDR blocks and host names pushes are taken from; empty: `--registry`'s addresses, or any without it. */
  revocationPushFrom: string[];
}

/** Durations were milliseconds named `-ms`; they take units now (a bare number is still milliseconds). */
const RENAMED_DURATIONS = [
  'heartbeat-interval',
  'handshake-timeout',
  'idle-timeout',
  'claim-timeout',
  'ping-interval',
  'pong-timeout',
  'close-grace',
  'url-lifetime',
];

/** The relay's flags and their variables (`TETHER_RELAY_<FLAG>`; README "Flags and variables"). */
export const RELAY_ENV: EnvScheme = {
  app: 'relay',
  renamedFlags: Object.fromEntries(RENAMED_DURATIONS.map((flag) => [`--${flag}-ms`, `--${flag}`])),
  secrets: ['--registry-token'],
};

function wsUrl(value: string): string {
  if (!/^wss?:\/\/[^\s]+$/.test(value)) throw new InvalidArgumentError('expected a ws:// or wss:// URL');
  return value;
}

function httpUrl(value: string): string {
  if (!/^https?:\/\/[^\s]+$/.test(value)) throw new InvalidArgumentError('expected an http:// or https:// URL');
  return value;
}

/** A list flag whose entries `check` parses, throwing TrustProxyError: commander's usage error instead. */
function addressList(check: (entries: string[]) => unknown) {
  return listArg((entry) => {
    try {
      check([entry]);
    } catch (err) {
      if (err instanceof TrustProxyError) throw new InvalidArgumentError(err.message);
      throw err;
    }
  });
}

/** `--trust-proxy`: IPs or CIDR blocks, repeatable or comma-separated. */
const trustProxyEntries = addressList((entries) => TrustedProxies.parse(entries));

/** `--revocation-push-from`: IPs, CIDR blocks or host names, repeatable or comma-separated. */
const pushFromEntries = addressList((entries) => PushSources.validate(entries));

/** The attribute of a limit's flag: `idleTimeout` for `--idle-timeout`. */
type LimitOption =
  | 'maxMessageBytes'
  | 'maxStreamsPerEnvironment'
  | 'maxConnectionsPerIp'
  | 'maxConnections'
  | 'maxSocketsPerUrl'
  | 'maxUnclaimedPerUrl'
  | 'maxHandshakeFrames'
  | 'handshakeTimeout'
  | 'idleTimeout'
  | 'claimTimeout'
  | 'pingInterval'
  | 'pongTimeout'
  | 'environmentHighWaterBytes'
  | 'harnessMaxBufferedBytes'
  | 'closeGrace'
  | 'urlLifetime'
  | 'maxRememberedRegistrations';

/** Each bound: its limit, its flag, help. Bytes and counts are numbers; a `…Ms` limit is a duration flag. */
const LIMIT_FLAGS: Array<[keyof RelayLimits, string, string]> = [
  ['maxMessageBytes', 'max-message-bytes', 'largest WebSocket message; larger → close 1009'],
  ['maxStreamsPerEnvironment', 'max-streams-per-environment', 'streams per environment; beyond → Reset stream_limit'],
  ['maxConnectionsPerIp', 'max-connections-per-ip', 'open sockets per source IP; beyond → HTTP 429'],
  ['maxConnections', 'max-connections', 'open sockets in all, both roles; beyond → HTTP 503 (connection_limit)'],
  ['maxSocketsPerUrl', 'max-sockets-per-url', 'open sockets per signed harness URL; beyond → HTTP 429 (url_limit)'],
  [
    'maxUnclaimedPerUrl',
    'max-unclaimed-per-url',
    'sockets of one harness URL without a Resume yet; beyond → HTTP 429 (url_unclaimed_limit)',
  ],
  ['maxHandshakeFrames', 'max-handshake-frames', 'harness frames before the environment answers; beyond → Reset'],
  ['handshakeTimeoutMs', 'handshake-timeout', 'the environment must answer a stream within this (handshake_timeout)'],
  ['idleTimeoutMs', 'idle-timeout', 'a stream silent both ways this long is reset (idle_timeout)'],
  ['claimTimeoutMs', 'claim-timeout', 'a harness socket must send Resume within this'],
  ['pingIntervalMs', 'ping-interval', 'WebSocket ping interval'],
  ['pongTimeoutMs', 'pong-timeout', 'a socket silent this long is dropped'],
  ['environmentHighWaterBytes', 'environment-high-water-bytes', 'pause harness reads above this environment backlog'],
  ['harnessMaxBufferedBytes', 'harness-max-buffered-bytes', 'reset a harness (relay_backpressure) above this backlog'],
  ['closeGraceMs', 'close-grace', 'time a closing socket gets before it is cut'],
  ['urlLifetimeMs', 'url-lifetime', 'the registry’s relay URL lifetime: revocations and epochs are kept this long'],
  ['maxRememberedRegistrations', 'max-remembered-registrations', 'revocations (and epochs) kept; oldest forgotten'],
];

/** Public key from a PEM file, else from the registry's `/v1/relay-signing-key`, retrying until stopped. */
async function loadPublicKey(options: ServeOptions, io: ServiceIo, log: Logger): Promise<KeyObject | null> {
  if (options.registryKeyFile) return publicKeyFromPem(readFileSync(options.registryKeyFile, 'utf8'));
  const endpoint = `${(options.registry as string).replace(/\/+$/, '')}/v1/relay-signing-key`;
  let stopped = false;
  void io.stopSignal.then(() => {
    stopped = true;
  });
  for (let attempt = 1; !stopped; attempt++) {
    try {
      const response = await fetch(endpoint, { signal: AbortSignal.timeout(5_000) });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const body = (await response.json()) as { public_key_pem?: unknown };
      if (typeof body.public_key_pem !== 'string') throw new Error('no public_key_pem in the answer');
      return publicKeyFromPem(body.public_key_pem);
    } catch (err) {
      log.warn({ attempt, err: (err as Error).message }, 'cannot fetch the registry signing key yet; retrying');
      await Promise.race([
        new Promise((resolve) => setTimeout(resolve, Math.min(5_000, 250 * attempt))),
        io.stopSignal,
      ]);
    }
  }
  return null;
}

/** Runs `relay serve` until io.stopSignal; returns the exit code. */
export async function runServe(options: ServeOptions, io: ServiceIo, logger?: Logger): Promise<number> {
  const log = logger ?? createLogger({ component: 'relay', level: options.logLevel, format: options.logFormat });
  if (!options.registryKeyFile && !options.registry) {
    io.stderr.write('relay: give --registry-key-file or --registry (to fetch the signing key)\n');
    return 2;
  }
  let publicKey: KeyObject | null;
  try {
    publicKey = await loadPublicKey(options, io, log);
  } catch (err) {
    io.stderr.write(`relay: cannot load the registry signing key: ${(err as Error).message}\n`);
    return 1;
  }
  if (!publicKey) return 0; // stopped before the key arrived
  if (options.registry && !options.registryToken) {
    log.warn(
      'no --registry-token: presence heartbeats are off (the registry then routes to every configured node) and ' +
        'revocations arrive only by the registry’s push',
    );
  }
  const limits: Partial<RelayLimits> = {};
  for (const [key, flag] of LIMIT_FLAGS) {
    const value = options[limitOption(flag)];
    if (value !== undefined) limits[key] = value;
  }
  const pushSources = await revocationPushSources(options, log);
  const telemetry = serviceTelemetry('relay', io, log);
  if (!telemetry) return 2;
  const relay = createRelay({
    publicKey,
    limits,
    logger: log,
    telemetry,
    trustProxy: TrustedProxies.parse(options.trustProxy),
    pushSources,
    ...(options.registry && options.registryToken
      ? {
          heartbeat: {
            registryUrl: options.registry,
            token: options.registryToken,
            intervalMs: options.heartbeatInterval,
            ...(options.publicUrl ? { publicUrl: options.publicUrl } : {}),
          },
        }
      : {}),
  });
  let url: string;
  try {
    url = await relay.listen(options.listen.host, options.listen.port);
  } catch (err) {
    io.stderr.write(
      `relay: cannot listen on ${options.listen.host}:${options.listen.port}: ${(err as Error).message}\n`,
    );
    await relay.close();
    return 1;
  }
  io.stdout.write(`${url}\n`);
  log.info({ url, publicUrl: options.publicUrl ?? url, limits: { ...DEFAULT_LIMITS, ...limits } }, 'relay listening');
  await io.stopSignal;
  log.info('shutting down');
  await relay.close();
  return 0;
}

/**
 * Where revocation pushes are taken from: `--revocation-push-from`; else the addresses `--registry`'s host resolves
 * to (a push from another address is refused 403); else, the registry's address being unknown, any address.
 */
async function revocationPushSources(options: ServeOptions, log: Logger): Promise<PushSources> {
  if (options.revocationPushFrom.length === 0 && !options.registry) {
    log.info('revocation pushes taken from any address (no --registry or --revocation-push-from)');
    return PushSources.any();
  }
  const { sources, ready } =
    options.revocationPushFrom.length > 0
      ? PushSources.of(options.revocationPushFrom)
      : PushSources.ofRegistry(options.registry as string);
  const resolved = await ready;
  if (resolved instanceof Error) {
    log.warn(
      { err: resolved.message, from: options.revocationPushFrom },
      'cannot resolve where revocation pushes come from: they are refused until it resolves (heartbeats still carry revocations)',
    );
  } else {
    log.info({ from: resolved }, 'revocation pushes taken from the registry’s addresses only');
  }
  return sources;
}

/** The option attribute of a limit's flag (`idle-timeout` → idleTimeout). */
function limitOption(flag: string): LimitOption {
  return flag.replace(/-([a-z])/g, (_, letter: string) => letter.toUpperCase()) as LimitOption;
}

/** `serve`'s options after --listen, in --help's order: the registry, then each bound, then who is trusted. */
function serveOptions(): Option[] {
  const options = [
    new Option('--public-url <url>', 'this node’s URL as the registry knows it (default: the bound URL)').argParser(
      wsUrl,
    ),
    new Option('--registry <url>', 'registry base URL: signing key (unless a file is given) and heartbeats').argParser(
      httpUrl,
    ),
    new Option('--registry-key-file <path>', 'the registry’s Ed25519 key as PEM (public SPKI or private PKCS#8)'),
    new Option(
      '--registry-token <token>',
      'API key with the relay role (heartbeats only; an admin key works but is not needed) for presence ' +
        'heartbeats and revocations (prefer the env variable)',
    ),
    // A bare number of a duration flag is milliseconds.
    durationOption('--heartbeat-interval', 'presence heartbeat interval', 10_000, 'ms'),
  ];
  for (const [key, flag, help] of LIMIT_FLAGS) {
    const value = DEFAULT_LIMITS[key];
    options.push(
      key.endsWith('Ms') ? durationOption(`--${flag}`, help, value, 'ms') : countOption(`--${flag}`, help, value),
    );
  }
  options.push(
    new Option(
      '--trust-proxy <cidr>',
      'take the client address from X-Forwarded-For (the rightmost hop not trusted) only when the peer is in ' +
        'one of these IPs or CIDR blocks; repeatable or comma-separated',
    )
      .argParser(trustProxyEntries)
      .default([], 'none'),
    new Option(
      '--revocation-push-from <address>',
      'take revocation pushes (POST /v1/revocations) only from these IPs, CIDR blocks or host names (resolved, ' +
        'again on a miss); repeatable or comma-separated. For registries whose outgoing address is not the one ' +
        '--registry names (a load balancer, a Kubernetes Service: name its headless service instead)',
    )
      .argParser(pushFromEntries)
      .default([], 'the addresses of --registry’s host; any without --registry'),
  );
  return options;
}

/** `relay serve`; `exit` receives the action's exit code. */
export function buildCli(io: ServiceIo, exit: (code: number) => void): Command {
  return serviceProgram<ServeOptions>(
    {
      scheme: RELAY_ENV,
      version: packageVersion(import.meta.url, '@tether/relay'),
      description: 'Tether relay: pairs harness and environment WebSockets and forwards frames it cannot read.',
      serve: {
        description: 'serve relay WebSockets (prints its bound URL on stdout, logs JSON on stderr)',
        listen: { scheme: 'ws', port: 8081 },
        options: serveOptions(),
        helpAfter: `
Durations take a unit: 500ms, 30s, 5m, 1h; a bare number is milliseconds (the -ms flags they replace, such
as --idle-timeout-ms, are still accepted for now, with a warning). Flags may also come before \`serve\`.`,
        run: (options) => runServe(options, io),
      },
    },
    io,
    exit,
  );
}
