import { randomUUID } from 'node:crypto';
import rateLimit from '@fastify/rate-limit';
import type { SigningKey } from '@tether/relay-auth';
import type { Telemetry, TelemetryOptions } from '@tether/telemetry';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import { corsRoutes } from './cors.js';
import { ERRORS, errorBody, RegistryError } from './errors.js';
import { createRegistryMetrics, type Metrics } from './metrics.js';
import { pollRevocations, RevocationPusher, revocationWindowMs } from './revocations.js';
import { browserGrantRoutes } from './routes/browser.js';
import { cloudRoutes } from './routes/cloud.js';
import { healthRoutes } from './routes/health.js';
import { v1Routes } from './routes/v1.js';
import { type RelayRoute, routeToExecutor } from './routing.js';
import type { ApiKeyRecord, RegistrationRecord, RegistryStore, Role } from './store/types.js';
import { hashToken } from './tokens.js';
import { uiRoutes } from './ui.js';

export interface RegistryConfig {
  /** Relay base URLs (`ws://…`/`wss://…`); each environment goes to one by rendezvous hashing. */
  relayUrls: string[];
  /** Lifetime of a `/connect` harness authorization, and of the harness relay URL issued with it; default 60 s. */
  authorizationTtlMs?: number;
  /** Lifetime of an executor's (environment) relay URL; default 24 h (codex re-registers when the relay refuses it). */
  relayUrlTtlMs?: number;
  /** A relay node counts as live this long after its last heartbeat; default 30 s. */
  relayPresenceTtlMs?: number;
  /**
   * Proxies (IPs or CIDR blocks) whose `X-Forwarded-For` names the client (`--trust-proxy`), for request logs
   * and `request.ip`, and whose `X-Forwarded-Proto`/`-Host` set the base of the browser-grant link; default
   * none: the socket's peer and the request's own `Host`.
   */
  trustProxy?: string[];
  /** How often expired harness authorizations are deleted; default 60 s. */
  pruneIntervalMs?: number;
  /** Request body limit in bytes; default 16 KiB (a NoiseChannelPublicKey is about 1.7 KB). */
  bodyLimit?: number;
  /** HTTP server limits (slow clients, connection floods); defaults in SERVER_LIMIT_DEFAULTS. */
  limits?: Partial<ServerLimits>;
  /** `/metrics` recomputes its environment gauges at most this often; default 5 000 ms. */
  metricsCacheMs?: number;
  /** How often revocations made by other processes (CLI, replicas) are looked for and pushed; default 2 000 ms. */
  revocationPollMs?: number;
  /** Timeout of each revocation push to a relay node; default 2 000 ms. */
  revocationPushTimeoutMs?: number;
  /**
   * The browser page under `/ui` (ui.ts): `dir` is the directory served, null when none was found (/ui answers
   * 404 saying so); absent: no `/ui` routes at all (`--no-ui`).
   */
  ui?: { dir: string | null };
  /**
   * Origins of pages hosted elsewhere (`--ui-origin`) that may call `/cloud/environment/:id/connect` and the
   * browser-grant exchange cross-origin (CORS, for these exact origins only).
   */
  uiOrigins?: string[];
  /** Lifetime of a browser session token (a browser grant exchanged); default 1 h. */
  browserSessionTtlMs?: number;
  /** Request rate limits (`--rate-limit-*`); defaults in RATE_LIMIT_DEFAULTS. */
  rateLimit?: Partial<RateLimits>;
}

/**
 * Requests allowed per `windowMs`: per client address (`request.ip`, so `--trust-proxy` applies) for requests
 * without a known API key (the browser-grant exchange, health probes, /ui, unknown bearer tokens, browser sessions),
 * and per API key for requests with one, whatever their address. Past it: 429 with Retry-After.
 */
export interface RateLimits {
  unauthenticated: number;
  perKey: number;
  windowMs: number;
}

export const RATE_LIMIT_DEFAULTS: RateLimits = { unauthenticated: 600, perKey: 6000, windowMs: 60_000 };

export interface ServerLimits {
  /** A socket idle this long is closed (Node `server.setTimeout`). */
  connectionTimeoutMs: number;
  /** A request must be fully received within this (Node `requestTimeout`). */
  requestTimeoutMs: number;
  /** A request's headers must arrive within this (Node `headersTimeout`): cuts slow-loris clients. */
  headersTimeoutMs: number;
  /** An idle keep-alive connection is closed after this. */
  keepAliveTimeoutMs: number;
  /** Connections beyond this many open at once are refused (closed on accept). */
  maxConnections: number;
}

export const SERVER_LIMIT_DEFAULTS: ServerLimits = {
  connectionTimeoutMs: 60_000,
  requestTimeoutMs: 30_000,
  headersTimeoutMs: 10_000,
  keepAliveTimeoutMs: 5_000,
  maxConnections: 10_000,
};

export interface RegistryDeps {
  store: RegistryStore;
  signingKey: SigningKey;
  /** A pino logger to log through (tests capture its output); default: no logging. */
  logger?: FastifyBaseLogger;
  /** Clock, epoch ms; default Date.now. */
  now?: () => number;
  /**
   * Where the metrics go: a Telemetry (its owner shuts it down), or the options of one the registry makes and
   * shuts down with the app (`registry serve`: OTLP from the OTEL_* variables, process metrics); default:
   * Prometheus only.
   */
  telemetry?: Telemetry | TelemetryOptions;
}

export interface ResolvedConfig {
  relayUrls: string[];
  authorizationTtlMs: number;
  relayUrlTtlMs: number;
  relayPresenceTtlMs: number;
  metricsCacheMs: number;
}

declare module 'fastify' {
  interface FastifyInstance {
    registry: { config: ResolvedConfig; store: RegistryStore; signingKey: SigningKey; now: () => number };
    metrics: Metrics;
    /** Pushes revocations to every relay node, best effort (see revocations.ts). */
    revocations: RevocationPusher;
    /**
     * Relay nodes to route to: the configured nodes with a recent heartbeat, or all configured nodes while
     * none has reported (a deployment without heartbeats still works).
     */
    liveRelayNodes(): Promise<string[]>;
    /**
     * Resolves once no store operation is in flight (or after `timeoutMs`); true when drained. Fastify's close()
     * does not wait for handlers whose client went away, so whoever owns the store awaits this before closing it.
     */
    drain(timeoutMs: number): Promise<boolean>;
    /**
     * Where a harness of this registration must go, and whether the executor is there: the node the registration
     * sent the executor to (by hash over the live nodes for a registration that names none). `up` when that node
     * is live and listed the environment in its latest heartbeat, `down` when nodes report but that one is not
     * live or does not list it (its executor is away, or failing over to another node), `unknown` when no node
     * reports (a deployment without heartbeats).
     */
    relayRoute(registration: Pick<RegistrationRecord, 'environmentId' | 'relayUrl'> | null): Promise<RelayRoute>;
  }
  interface FastifyRequest {
    apiKey: ApiKeyRecord | null;
  }
}

/** The header a request id travels in, both ways. */
export const REQUEST_ID_HEADER = 'x-request-id';

/** On a `/validate` answer: the request id of the `/connect` that issued the authorization it consumed. */
export const CONNECT_REQUEST_ID_HEADER = 'x-tether-connect-request-id';

/**
 * On a `/validate` answer that says yes: the API key that minted the authorization at `/connect` (its id,
 * percent-encoded, and its role), so the executor knows whose the harness's detached processes are. Headers, not
 * body fields: Codex's executor ignores them (and its strict body decoding would not ignore a new field).
 */
export const HARNESS_KEY_ID_HEADER = 'x-tether-harness-key-id';
export const HARNESS_KEY_ROLE_HEADER = 'x-tether-harness-key-role';

/** A request id we accept from a caller: 1-128 characters of letters, digits and `._:-`; else null. */
export function requestIdFrom(value: string | string[] | undefined): string | null {
  return typeof value === 'string' && /^[A-Za-z0-9._:-]{1,128}$/.test(value) ? value : null;
}

/** Builds the registry app (never listens): Codex routes under `/cloud`, health probes. */
export async function buildRegistry(config: RegistryConfig, deps: RegistryDeps): Promise<FastifyInstance> {
  if (config.relayUrls.length === 0) throw new Error('at least one relay URL is required');
  const limits = resolveLimits(config.limits);
  const app = Fastify({
    ...(deps.logger ? { loggerInstance: deps.logger } : { logger: false }),
    // A caller's well-formed x-request-id becomes the request's id (logged as reqId, echoed back), so one
    // id follows a harness's /connect into the logs; anything else gets a fresh one.
    genReqId: (request) => requestIdFrom(request.headers[REQUEST_ID_HEADER]) ?? randomUUID(),
    ...(config.trustProxy && config.trustProxy.length > 0 ? { trustProxy: config.trustProxy } : {}),
    bodyLimit: config.bodyLimit ?? 16 * 1024,
    connectionTimeout: limits.connectionTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    http: {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      // Node checks header and request deadlines on this interval (default 30 s): without a shorter one a
      // 1 s headers timeout would still let a slow-loris client hold its socket for up to 30 s.
      connectionsCheckingInterval: Math.max(10, Math.min(1_000, Math.floor(limits.headersTimeoutMs / 2))),
    },
    // Requests still arriving while closing are served (and counted by drain()) rather than answered with
    // Fastify's own 503 body, which is not in our error format.
    return503OnClosing: false,
    // Environment ids go up to 128 characters (find-my-way's default cap is 100); the schema enforces 128.
    routerOptions: { maxParamLength: 256 },
    ajv: { customOptions: { removeAdditional: false, coerceTypes: false, allErrors: false } },
    // Errors the router raises before any route runs (a path whose percent-escapes do not decode) get the
    // registry's error format too, not Fastify's own body (found by fuzzing).
    frameworkErrors: (_error, _request, reply) => {
      // Typed per route generic; this one answers before any route, so the plain reply type is the one.
      (reply as FastifyReply).code(400).send(errorBody('invalid_request', 'the request path is not valid'));
    },
  });
  app.addHook('onRequest', async (request, reply) => {
    reply.header(REQUEST_ID_HEADER, request.id);
  });
  // Connections past the cap are closed as they are accepted, before any byte is read.
  app.server.maxConnections = limits.maxConnections;
  const tracked = trackStore(deps.store);
  app.decorate('registry', {
    config: {
      relayUrls: config.relayUrls,
      authorizationTtlMs: config.authorizationTtlMs ?? 60_000,
      relayUrlTtlMs: config.relayUrlTtlMs ?? 24 * 3600_000,
      relayPresenceTtlMs: config.relayPresenceTtlMs ?? 30_000,
      metricsCacheMs: config.metricsCacheMs ?? 5_000,
    },
    store: tracked.store,
    signingKey: deps.signingKey,
    now: deps.now ?? Date.now,
  });
  app.decorateRequest('apiKey', null);
  app.decorate('metrics', await createRegistryMetrics(deps.telemetry));
  app.decorate(
    'revocations',
    new RevocationPusher({
      relayUrls: config.relayUrls,
      signingKey: deps.signingKey,
      log: app.log,
      now: app.registry.now,
      ...(config.revocationPushTimeoutMs ? { timeoutMs: config.revocationPushTimeoutMs } : {}),
    }),
  );
  app.decorate('liveRelayNodes', async () => {
    const { relayUrls, relayPresenceTtlMs } = app.registry.config;
    const seen = await app.registry.store.liveRelayNodes(app.registry.now() - relayPresenceTtlMs);
    const live = relayUrls.filter((url) => seen.some((node) => node.url === url));
    return live.length > 0 ? live : relayUrls;
  });
  app.decorate('relayRoute', async (registration: Pick<RegistrationRecord, 'environmentId' | 'relayUrl'> | null) => {
    const { relayUrls, relayPresenceTtlMs } = app.registry.config;
    if (!registration) return { node: null, status: 'unknown' as const, lastSeen: null };
    const [seen, link] = await Promise.all([
      app.registry.store.liveRelayNodes(app.registry.now() - relayPresenceTtlMs),
      app.registry.store.relayLink(registration.environmentId),
    ]);
    return routeToExecutor(registration, relayUrls, seen, link);
  });
  app.decorate('drain', (timeoutMs: number) => tracked.drain(timeoutMs));
  // Expired authorizations are useless (consumption checks expiry); delete them now and then.
  let pruner: NodeJS.Timeout | undefined;
  let stopPolling: (() => void) | undefined;
  app.addHook('onReady', async () => {
    stopPolling = pollRevocations(app.registry.store, app.revocations, {
      intervalMs: config.revocationPollMs ?? 2_000,
      windowMs: revocationWindowMs(app.registry.config),
      now: app.registry.now,
      log: app.log,
    });
    pruner = setInterval(() => {
      app.registry.store.pruneAuthorizations(app.registry.now()).catch((err: unknown) => {
        app.log.warn({ err }, 'pruning expired authorizations failed');
      });
      app.registry.store.pruneBrowserGrants(app.registry.now()).catch((err: unknown) => {
        app.log.warn({ err }, 'pruning expired browser grants failed');
      });
    }, config.pruneIntervalMs ?? 60_000);
    pruner.unref();
  });
  app.addHook('preClose', async () => {
    clearInterval(pruner);
    stopPolling?.();
  });
  // Pushes are bounded by their timeout; closing waits for them so that no socket outlives the app.
  app.addHook('onClose', async () => {
    await app.revocations.settled();
    await app.metrics.close();
  });
  // Callback style: no promise per response.
  app.addHook('onResponse', (request, reply, done) => {
    app.metrics.inc('registry_http_requests_total', {
      method: request.method,
      route: request.routeOptions.url ?? 'unmatched',
      status: String(reply.statusCode),
    });
    done();
  });
  // JSON only: without this, text/plain bodies would reach the schema as strings.
  app.removeContentTypeParser('text/plain');

  app.setErrorHandler((error: FastifyError, request, reply) => {
    if (error instanceof RegistryError) return reply.code(error.statusCode).send(errorBody(error.code, error.message));
    if (error.validation) {
      const code = error.validationContext === 'params' ? 'invalid_environment_id' : 'invalid_request';
      return reply.code(400).send(errorBody(code, code === 'invalid_request' ? error.message : undefined));
    }
    switch (error.code) {
      case 'FST_ERR_CTP_BODY_TOO_LARGE':
        return reply.code(413).send(errorBody('body_too_large'));
      case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
        return reply.code(415).send(errorBody('unsupported_media_type'));
      case 'FST_ERR_CTP_INVALID_JSON_BODY':
      case 'FST_ERR_CTP_EMPTY_JSON_BODY':
        return reply.code(400).send(errorBody('invalid_json'));
    }
    if (error.statusCode && error.statusCode < 500) {
      return reply.code(error.statusCode).send(errorBody('invalid_request', error.message));
    }
    request.log.error({ err: error }, 'request failed');
    return reply.code(500).send(errorBody('internal'));
  });
  app.setNotFoundHandler((_request, reply) => reply.code(404).send(errorBody('not_found')));

  await registerRateLimits(app, { ...RATE_LIMIT_DEFAULTS, ...config.rateLimit });
  // On the root itself, before the routes, so that its onSend hook sees them.
  await corsRoutes(app, { origins: config.uiOrigins ?? [] });
  await app.register(healthRoutes);
  await app.register(cloudRoutes, { prefix: '/cloud/environment' });
  await app.register(browserGrantRoutes, {
    prefix: '/cloud/browser-grants',
    sessionTtlMs: config.browserSessionTtlMs ?? 3600_000,
  });
  await app.register(v1Routes, { prefix: '/v1' });
  if (config.ui) await app.register(uiRoutes, { dir: config.ui.dir, relayUrls: config.relayUrls });
  return app;
}

function resolveLimits(given: Partial<ServerLimits> = {}): ServerLimits {
  const limits = { ...SERVER_LIMIT_DEFAULTS, ...given };
  for (const [name, value] of Object.entries(limits)) {
    if (!Number.isSafeInteger(value) || value < 1) throw new RangeError(`${name} must be a positive integer`);
  }
  // Node refuses a headers timeout longer than the request timeout.
  if (limits.headersTimeoutMs > limits.requestTimeoutMs) {
    throw new RangeError('headersTimeoutMs must not exceed requestTimeoutMs');
  }
  return limits;
}

/** The store seen by the routes, counting operations in flight so that drain() can wait for them. */
function trackStore(store: RegistryStore) {
  let inFlight = 0;
  const idle: Array<() => void> = [];
  const wrappers = new Map<PropertyKey, { value: unknown; wrapper: unknown }>();
  const wrapped = new Proxy(store, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver);
      if (typeof value !== 'function' || property === 'close') return value;
      const known = wrappers.get(property);
      if (known && known.value === value) return known.wrapper;
      const wrapper = async (...args: unknown[]) => {
        inFlight++;
        try {
          return await value.apply(target, args);
        } finally {
          if (--inFlight === 0) for (const wake of idle.splice(0)) wake();
        }
      };
      wrappers.set(property, { value, wrapper });
      return wrapper;
    },
  });
  // A handler's next store call follows the previous one within microtasks, so "idle" means idle across a
  // macrotask turn.
  const settledIdle = () => new Promise<boolean>((resolve) => setImmediate(() => resolve(inFlight === 0)));
  const drain = async (timeoutMs: number): Promise<boolean> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (inFlight === 0 && (await settledIdle())) return true;
      const left = deadline - Date.now();
      if (left <= 0) return false;
      const woke = await new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), left);
        idle.push(() => {
          clearTimeout(timer);
          resolve(true);
        });
      });
      if (!woke) return false;
    }
  };
  return { store: wrapped, drain };
}

/**
 * Rate limits on every route (registered before them): a request whose bearer token is a known, unrevoked API key
 * counts against that key's id; any other (no token, an unknown one, a browser session) against its client address.
 * The raw token is only hashed for the store look-up (cached), never kept. A refusal is counted in
 * registry_rate_limited_total by route and reason and answered 429 `rate_limited` with Retry-After; it is not
 * logged on its own (the error handler logs only 5xx).
 */
async function registerRateLimits(app: FastifyInstance, limits: RateLimits) {
  const KEY = 'key:';
  await app.register(rateLimit, {
    global: true,
    timeWindow: limits.windowMs,
    max: (_request, key) => (key.startsWith(KEY) ? limits.perKey : limits.unauthenticated),
    keyGenerator: async (request) => {
      const token = bearer(request);
      // A store that cannot answer leaves the request to its address's budget; the route then says why it fails.
      const key =
        token === null ? undefined : await app.registry.store.findApiKey(hashToken(token)).catch(() => undefined);
      return key ? `${KEY}${key.id}` : `ip:${request.ip}`;
    },
    onExceeded: (request, key) => {
      app.metrics.inc('registry_rate_limited_total', {
        route: request.routeOptions.url ?? 'unmatched',
        reason: key.startsWith(KEY) ? 'api_key' : 'address',
      });
    },
    errorResponseBuilder: () => new RegistryError('rate_limited'),
  });
}

/** The bearer token of a request, or null; never logged. */
function bearer(request: FastifyRequest): string | null {
  const header = request.headers.authorization;
  if (typeof header !== 'string') return null;
  const match = /^Bearer ([\x21-\x7e]{1,512})$/.exec(header);
  return match ? (match[1] as string) : null;
}

/** onRequest hook for a route group: a known, unrevoked API key of exactly `role` (or one of `role`), else 401/403. */
export function requireRole(app: FastifyInstance, role: Role | readonly Role[]) {
  const roles: readonly Role[] = typeof role === 'string' ? [role] : role;
  const message = `this route needs ${roles.map((r) => `${/^[aeiou]/.test(r) ? 'an' : 'a'} ${r}`).join(' or ')} key`;
  return async (request: FastifyRequest) => {
    const token = bearer(request);
    const key = token === null ? undefined : await app.registry.store.findApiKey(hashToken(token));
    if (!key) throw new RegistryError('unauthorized');
    if (!roles.includes(key.role)) throw new RegistryError('forbidden_role', message);
    request.apiKey = key;
  };
}

export { ERRORS };
