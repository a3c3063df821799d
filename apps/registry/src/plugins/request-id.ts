import { randomUUID } from 'node:crypto';
import type { FastifyInstance, RawRequestDefaultExpression } from 'fastify';
import fp from 'fastify-plugin';

/** The header a request id travels in, both ways. */
export const REQUEST_ID_HEADER = 'x-request-id';

/** A request id we accept from a caller: 1-128 characters of letters, digits and `._:-`; else null. */
export function requestIdFrom(value: string | string[] | undefined): string | null {
  return typeof value === 'string' && /^[A-Za-z0-9._:-]{1,128}$/.test(value) ? value : null;
}

/**
 * Fastify's `genReqId`: a caller's well-formed x-request-id becomes the request's id (logged as reqId, echoed
 * back), so one id follows a harness's /connect into the logs; anything else gets a fresh one.
 */
export const genReqId = (request: RawRequestDefaultExpression) =>
  requestIdFrom(request.headers[REQUEST_ID_HEADER]) ?? randomUUID();

/** Every answer carries its request's id (the server was built with genReqId above). */
export default fp(
  async (app: FastifyInstance) => {
    app.addHook('onRequest', async (request, reply) => {
      reply.header(REQUEST_ID_HEADER, request.id);
    });
  },
  { name: 'request-id' },
);
