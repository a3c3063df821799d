import type { FastifyInstance } from 'fastify';
import { errorBody } from '../errors.js';
import { ErrorResponse, StatusResponse } from '../schemas.js';

/** `/livez` (process up) and `/readyz` (store reachable). */
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
}
