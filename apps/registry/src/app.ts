import type { SigningKey } from '@tether/relay-auth';
import type { Telemetry, TelemetryOptions } from '@tether/telemetry';
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply } from 'fastify';
import { errorBody } from './errors.js';
import auth from './plugins/auth.js';
import configPlugin from './plugins/config.js';
import cors from './plugins/cors.js';
import errorHandler from './plugins/error-handler.js';
import metrics from './plugins/metrics.js';
import rateLimit, { type RateLimits } from './plugins/rate-limit.js';
import relayNodes from './plugins/relay-nodes.js';
import requestId, { genReqId } from './plugins/request-id.js';
import revocations from './plugins/revocations.js';
import store from './plugins/store.js';
import { browserGrantRoutes } from './routes/browser.js';
import { cloudRoutes } from './routes/cloud.js';
import { healthRoutes } from './routes/health.js';
import { uiRoutes } from './routes/ui.js';
import { v1Routes } from './routes/v1.js';
import type { RegistryStore } from './store/types.js';

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
   * The browser page under `/ui` (routes/ui.ts): `dir` is the directory served, null when none was found (/ui answers
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

/** Builds the registry app (never listens): Codex routes under `/cloud`, health probes. */
export async function buildRegistry(config: RegistryConfig, deps: RegistryDeps): Promise<FastifyInstance> {
  if (config.relayUrls.length === 0) throw new Error('at least one relay URL is required');
  const limits = resolveLimits(config.limits);
  const app = Fastify({
    ...(deps.logger ? { loggerInstance: deps.logger } : { logger: false }),
    genReqId,
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
  // Connections past the cap are closed as they are accepted, before any byte is read.
  app.server.maxConnections = limits.maxConnections;

  // The plugins decorate the root (fastify-plugin), each after those it names as dependencies; the routes below
  // use only their decorators. Hooks run in this order: the request id, then the rate limit, then a route's auth.
  await app.register(requestId);
  await app.register(configPlugin, {
    config: {
      relayUrls: config.relayUrls,
      authorizationTtlMs: config.authorizationTtlMs ?? 60_000,
      relayUrlTtlMs: config.relayUrlTtlMs ?? 24 * 3600_000,
      relayPresenceTtlMs: config.relayPresenceTtlMs ?? 30_000,
      metricsCacheMs: config.metricsCacheMs ?? 5_000,
    },
    now: deps.now ?? Date.now,
  });
  await app.register(store, { store: deps.store, pruneIntervalMs: config.pruneIntervalMs });
  await app.register(metrics, { telemetry: deps.telemetry });
  await app.register(relayNodes, { signingKey: deps.signingKey });
  await app.register(revocations, { pollMs: config.revocationPollMs, pushTimeoutMs: config.revocationPushTimeoutMs });
  await app.register(auth);
  await app.register(errorHandler);
  await app.register(rateLimit, config.rateLimit ?? {});
  await app.register(cors, { origins: config.uiOrigins ?? [] });

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
