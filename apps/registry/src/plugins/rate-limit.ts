import rateLimit from '@fastify/rate-limit';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { RegistryError } from '../errors.js';

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

const KEY = 'key:';

/**
 * Rate limits on every route (registered before them): a request whose bearer token is a known, unrevoked API key
 * counts against that key's id; any other (no token, an unknown one, a browser session) against its client address.
 * A refusal is counted in registry_rate_limited_total by route and reason and answered 429 `rate_limited` with
 * Retry-After; it is not logged on its own (the error handler logs only 5xx).
 */
export default fp(
  async (app: FastifyInstance, options: Partial<RateLimits>) => {
    const limits = { ...RATE_LIMIT_DEFAULTS, ...options };
    await app.register(rateLimit, {
      global: true,
      timeWindow: limits.windowMs,
      max: (_request, key) => (key.startsWith(KEY) ? limits.perKey : limits.unauthenticated),
      keyGenerator: async (request) => {
        // A store that cannot answer leaves the request to its address's budget; the route then says why it fails.
        const key = await app.apiKeyOf(request).catch(() => undefined);
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
  },
  { name: 'rate-limit', dependencies: ['auth', 'metrics'] },
);
