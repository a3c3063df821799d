import type { FastifyError, FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { errorBody, RegistryError } from '../errors.js';

/**
 * Every error in the registry's format, `{"error":{"code","message"}}` (errors.ts): ours, schema failures, body
 * parsing, unknown routes; only 5xx are logged. Bodies are JSON only: without removing the text/plain parser,
 * text bodies would reach the schema as strings.
 */
export default fp(
  async (app: FastifyInstance) => {
    app.removeContentTypeParser('text/plain');
    app.setErrorHandler((error: FastifyError, request, reply) => {
      if (error instanceof RegistryError) {
        return reply.code(error.statusCode).send(errorBody(error.code, error.message));
      }
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
  },
  { name: 'error-handler' },
);
