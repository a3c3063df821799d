import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { errorBody } from '../errors.js';

/**
 * The routes a browser page hosted elsewhere (`--ui-origin`) may call cross-origin: the harness's /connect and
 * the browser-grant exchange. Nothing else answers CORS; the page served under /ui is same-origin and needs none.
 */
export const CORS_ROUTES = ['/cloud/environment/:id/connect', '/cloud/browser-grants/exchange'] as const;

const ALLOWED_HEADERS = 'authorization, content-type, x-request-id';

/**
 * CORS for CORS_ROUTES and exactly `origins`: preflights (OPTIONS) answered 204, and `access-control-allow-origin`
 * on their answers (errors included, so the page can read them). Any other origin gets no CORS header, and its
 * preflight the 404 every OPTIONS got before. With no origins nothing is registered. On the root (fastify-plugin),
 * registered before the routes, so that its onSend hook sees them.
 */
async function cors(app: FastifyInstance, options: { origins: readonly string[] }) {
  const allowed = new Set(options.origins);
  if (allowed.size === 0) return;
  const routes = new Set<string>(CORS_ROUTES);
  const allowedOrigin = (origin: string | string[] | undefined) =>
    typeof origin === 'string' && allowed.has(origin) ? origin : null;

  for (const url of CORS_ROUTES) {
    app.options(url, async (request, reply) => {
      const origin = allowedOrigin(request.headers.origin);
      reply.header('vary', 'origin');
      if (origin === null || request.headers['access-control-request-method'] !== 'POST') {
        return reply.code(404).send(errorBody('not_found'));
      }
      return reply
        .code(204)
        .header('access-control-allow-origin', origin)
        .header('access-control-allow-methods', 'POST')
        .header('access-control-allow-headers', ALLOWED_HEADERS)
        .header('access-control-max-age', '600')
        .send();
    });
  }

  app.addHook('onSend', async (request, reply, payload) => {
    if (request.method !== 'POST' || !routes.has(request.routeOptions.url ?? '')) return payload;
    reply.header('vary', 'origin');
    const origin = allowedOrigin(request.headers.origin);
    if (origin !== null) {
      reply.header('access-control-allow-origin', origin);
      reply.header('access-control-expose-headers', 'x-request-id');
    }
    return payload;
  });
}

export default fp(cors, { name: 'cors' });
