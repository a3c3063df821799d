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
    /**
     * A share link's grant (`harness share`): its session reaches only processes shared with it, by their share
     * tokens, and at most with this access. Absent: a sign-in grant, the key's own access (`harness login --web`).
     */
    share_access: Type.Optional(Type.Union([Type.Literal('view'), Type.Literal('control')])),
  },
  { additionalProperties: false },
);
type GrantBody = Static<typeof GrantBody>;
const GrantResponse = Type.Object({
  grant: Type.String(),
  environment_id: Type.String(),
  share_access: Type.Optional(Type.Union([Type.Literal('view'), Type.Literal('control')])),
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
  share_access: Type.Optional(Type.Union([Type.Literal('view'), Type.Literal('control')])),
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
      // A view-only key's link is a view link, whatever it asked for (the executor caps it too).
      const asked = request.body.share_access;
      const shareAccess = asked === undefined ? null : key.access === 'view' ? 'view' : asked;
      await store.createBrowserGrant({
        tokenHash: hashToken(grant),
        environmentId,
        apiKeyId: key.id,
        expiresAt: expiresAt * 1000,
        shareAccess,
      });
      request.log.info({ environmentId, apiKeyId: key.id, expiresAt, shareAccess }, 'browser grant issued');
      // The fragment never reaches a server (nor its logs, nor a Referer: the page sends no-referrer).
      const base = `${request.protocol}://${request.host}`;
      const url = `${base}/ui/#env=${encodeURIComponent(environmentId)}&grant=${encodeURIComponent(grant)}`;
      return reply.code(201).send({
        grant,
        environment_id: environmentId,
        expires_at: expiresAt,
        url,
        ...(shareAccess === null ? {} : { share_access: shareAccess }),
      });
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
        {
          environmentId: session.environmentId,
          apiKeyId: session.apiKeyId,
          expiresAt,
          shareAccess: session.shareAccess,
        },
        'browser grant exchanged',
      );
      return {
        token,
        environment_id: session.environmentId,
        expires_at: expiresAt,
        ...(session.shareAccess === null ? {} : { share_access: session.shareAccess }),
      };
    },
  );
}
