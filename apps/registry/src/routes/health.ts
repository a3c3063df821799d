import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { errorBody } from '../errors.js';
import { ErrorResponse, StatusResponse } from '../schemas.js';

/** `/livez` (process up), `/readyz` (store reachable) and `/metrics` (Prometheus text). */
export async function healthRoutes(app: FastifyInstance) {
  app.get('/livez', { schema: { response: { 200: StatusResponse } } }, async () => ({ status: 'ok' }));
  app.get('/readyz', { schema: { response: { 200: StatusResponse, 503: ErrorResponse } } }, async (request, reply) => {
    try {
      await app.registry.store.ping();
      return { status: 'ok' };
    } catch (err) {
      request.log.warn({ err }, 'store unreachable');
      return reply.code(503).send(errorBody('store_unavailable'));
    }
  });
  const environmentGauges = sharedScan(
    async () => {
      const environments = await app.registry.store.listEnvironments();
      return { known: environments.length, registered: environments.filter((e) => e.registration !== null).length };
    },
    app.registry.config.metricsCacheMs,
    app.registry.now,
  );
  app.get('/metrics', { schema: { response: { 200: Type.String() } } }, async (_request, reply) => {
    const environments = await environmentGauges();
    const live = await app.liveRelayNodes();
    reply.type('text/plain; version=0.0.4; charset=utf-8');
    return app.metrics.render({
      registry_environments: { help: 'Known environments.', value: environments.known },
      registry_registered_environments: {
        help: 'Environments with a current executor registration.',
        value: environments.registered,
      },
      registry_relay_nodes_routable: { help: 'Relay nodes environments are routed to.', value: live.length },
    });
  });
}

/**
 * `/metrics` is unauthenticated, and counting environments scans them all: reuse a scan for `ttlMs`, and let
 * scrapes that arrive while one is running share it, so a flood of scrapes costs at most one scan per `ttlMs`.
 */
export function sharedScan<T>(scan: () => Promise<T>, ttlMs: number, now: () => number): () => Promise<T> {
  let last: { value: T; at: number } | null = null;
  let running: Promise<T> | null = null;
  return () => {
    if (last && now() - last.at < ttlMs) return Promise.resolve(last.value);
    running ??= scan()
      .then((value) => {
        last = { value, at: now() };
        return value;
      })
      .finally(() => {
        running = null;
      });
    return running;
  };
}
