import { type Static, Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { RegistryError } from '../errors.js';
import { SESSION_PREFIX } from '../plugins/auth.js';
import { authErrors, ErrorResponse } from '../schemas.js';
import { ENVIRONMENT_ID_PATTERN, generateToken, hashToken, matchesEnvironmentGlob } from '../tokens.js';

/** Prefix of a browser grant (one-time, minutes); the session token it is exchanged for has SESSION_PREFIX. */
export const GRANT_PREFIX = 'tbgr';
export const GRANT_TTL_DEFAULT_S = 300;
export const GRANT_TTL_MAX_S = 900;

const GrantBody = Type.Object(
  {
    environment_id: Type.String({ pattern: ENVIRONMENT_ID_PATTERN }),
    ttl_seconds: Type.Optional(Type.Integer({ minimum: 1, maximum: GRANT_TTL_MAX_S })),
  },
  { additionalProperties: false },
);
type GrantBody = Static<typeof GrantBody>;
const GrantResponse = Type.Object({
  grant: Type.String(),
  environment_id: Type.String(),
  expires_at: Type.Integer(),
  url: Type.String(),
});
const ExchangeBody = Type.Object(
  { grant: Type.String({ minLength: 1, maxLength: 256 }) },
  { additionalProperties: false },
);
type ExchangeBody = Static<typeof ExchangeBody>;
const ExchangeResponse = Type.Object({
  token: Type.String(),
  environment_id: Type.String(),
  expires_at: Type.Integer(),
});

/**
 * Browser grants (issue 21), under `/cloud/browser-grants`: a harness key mints a one-time grant for one
 * environment (`POST /`), which a page exchanges, unauthenticated, for a session token (`POST /exchange`) that
 * acts as that key on that environment's `/connect` only (requireHarnessOrSession, plugins/auth.ts). Grants and
 * tokens are never logged.
 */
export async function browserGrantRoutes(app: FastifyInstance, options: { sessionTtlMs: number }) {
  const { store, now } = app;

  app.post<{ Body: GrantBody }>(
    '/',
    {
      onRequest: app.requireRole('harness'),
      schema: { body: GrantBody, response: { 201: GrantResponse, ...authErrors } },
    },
    async (request, reply) => {
      const environmentId = request.body.environment_id;
      const key = request.apiKey as NonNullable<typeof request.apiKey>;
      if (!matchesEnvironmentGlob(key.environments, environmentId)) throw new RegistryError('forbidden_environment');
      const grant = generateToken(GRANT_PREFIX);
      const expiresAt = Math.floor(now() / 1000) + (request.body.ttl_seconds ?? GRANT_TTL_DEFAULT_S);
      await store.createBrowserGrant({
        tokenHash: hashToken(grant),
        environmentId,
        apiKeyId: key.id,
        expiresAt: expiresAt * 1000,
      });
      request.log.info({ environmentId, apiKeyId: key.id, expiresAt }, 'browser grant issued');
      // The fragment never reaches a server (nor its logs, nor a Referer: the page sends no-referrer).
      const base = `${request.protocol}://${request.host}`;
      const url = `${base}/ui/#env=${encodeURIComponent(environmentId)}&grant=${encodeURIComponent(grant)}`;
      return reply.code(201).send({ grant, environment_id: environmentId, expires_at: expiresAt, url });
    },
  );

  app.post<{ Body: ExchangeBody }>(
    '/exchange',
    { schema: { body: ExchangeBody, response: { 200: ExchangeResponse, 400: ErrorResponse, 401: ErrorResponse } } },
    async (request) => {
      const token = generateToken(SESSION_PREFIX);
      const at = now();
      const session = await store.exchangeBrowserGrant({
        grantHash: hashToken(request.body.grant),
        sessionHash: hashToken(token),
        sessionExpiresAt: at + options.sessionTtlMs,
        now: at,
      });
      if (!session) {
        request.log.info('browser grant refused');
        throw new RegistryError('invalid_grant');
      }
      const expiresAt = Math.floor(session.expiresAt / 1000);
      request.log.info(
        { environmentId: session.environmentId, apiKeyId: session.apiKeyId, expiresAt },
        'browser grant exchanged',
      );
      return { token, environment_id: session.environmentId, expires_at: expiresAt };
    },
  );
}
