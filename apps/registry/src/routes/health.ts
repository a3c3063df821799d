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
  app.get('/metrics', { schema: { response: { 200: Type.String() } } }, async (_request, reply) => {
    const environments = await app.registry.store.listEnvironments();
    const live = await app.liveRelayNodes();
    reply.type('text/plain; version=0.0.4; charset=utf-8');
    return app.metrics.render({
      registry_environments: { help: 'Known environments.', value: environments.length },
      registry_registered_environments: {
        help: 'Environments with a current executor registration.',
        value: environments.filter((e) => e.registration !== null).length,
      },
      registry_relay_nodes_routable: { help: 'Relay nodes environments are routed to.', value: live.length },
    });
  });
}
