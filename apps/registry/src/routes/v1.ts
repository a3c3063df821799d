import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { requireRole } from '../app.js';
import { RegistryError } from '../errors.js';
import { pickRelayNode } from '../routing.js';
import { authErrors, ErrorResponse, StatusResponse } from '../schemas.js';
import { ENVIRONMENT_ID_PATTERN } from '../tokens.js';

const EnvironmentView = Type.Object({
  environment_id: Type.String(),
  created_at: Type.Number(),
  registered: Type.Boolean(),
  executor_registration_id: Type.Union([Type.String(), Type.Null()]),
  registered_at: Type.Union([Type.Number(), Type.Null()]),
  relay_node: Type.Union([Type.String(), Type.Null()]),
  relay_link: Type.Union([Type.Literal('up'), Type.Literal('down'), Type.Literal('unknown')]),
  last_seen: Type.Union([Type.Number(), Type.Null()]),
});

const RelayNodeView = Type.Object({
  url: Type.String(),
  live: Type.Boolean(),
  last_seen: Type.Union([Type.Number(), Type.Null()]),
});

const RevokeParams = Type.Object({
  id: Type.String({ pattern: ENVIRONMENT_ID_PATTERN }),
  registration_id: Type.String({ minLength: 1, maxLength: 256 }),
});

/** Our own API beside Codex's: the relay signing key (public), and admin views and actions. */
export async function v1Routes(app: FastifyInstance) {
  const { store, config, signingKey, now } = app.registry;

  app.get(
    '/relay-signing-key',
    {
      schema: {
        response: {
          200: Type.Object({
            algorithm: Type.Literal('Ed25519'),
            public_key: Type.String(),
            public_key_pem: Type.String(),
          }),
        },
      },
    },
    async () => ({
      algorithm: 'Ed25519' as const,
      public_key: signingKey.publicKey.export({ format: 'jwk' }).x as string,
      public_key_pem: signingKey.publicKey.export({ type: 'spki', format: 'pem' }) as string,
    }),
  );

  await app.register(async (admin) => {
    admin.addHook('onRequest', requireRole(app, 'admin'));

    admin.get(
      '/environments',
      { schema: { response: { 200: Type.Object({ environments: Type.Array(EnvironmentView) }), ...authErrors } } },
      async () => {
        const live = await app.liveRelayNodes();
        const environments = await store.listEnvironments();
        const links = await Promise.all(environments.map((e) => app.relayLinkStatus(e.environmentId)));
        return {
          environments: environments.map((e, i) => ({
            environment_id: e.environmentId,
            created_at: e.createdAt,
            registered: e.registration !== null,
            executor_registration_id: e.registration?.registrationId ?? null,
            registered_at: e.registration?.createdAt ?? null,
            relay_node: e.registration ? (pickRelayNode(live, e.environmentId) ?? null) : null,
            relay_link: links[i]?.status ?? 'unknown',
            last_seen: links[i]?.lastSeen ?? null,
          })),
        };
      },
    );

    admin.delete<{ Params: { id: string; registration_id: string } }>(
      '/environments/:id/registrations/:registration_id',
      { schema: { params: RevokeParams, response: { 200: StatusResponse, ...authErrors, 404: ErrorResponse } } },
      async (request) => {
        const revoked = await store.revokeRegistration(request.params.id, request.params.registration_id);
        if (!revoked) throw new RegistryError('registration_not_found');
        request.log.info({ environmentId: request.params.id }, 'registration revoked');
        return { status: 'revoked' };
      },
    );

    admin.post<{ Body: { url: string; environments?: string[] } }>(
      '/relay/heartbeat',
      {
        // A busy node lists many environment ids: a larger limit than the Codex routes' 16 KiB.
        bodyLimit: 4 * 1024 * 1024,
        schema: {
          body: Type.Object({
            url: Type.String({ maxLength: 2048 }),
            /** Environments whose executor socket is connected to this node right now. */
            environments: Type.Optional(
              Type.Array(Type.String({ pattern: ENVIRONMENT_ID_PATTERN }), { maxItems: 100_000 }),
            ),
          }),
          response: { 200: StatusResponse, ...authErrors },
        },
      },
      async (request) => {
        if (!config.relayUrls.includes(request.body.url)) throw new RegistryError('unknown_relay_node');
        await store.heartbeatRelayNode(request.body.url, now(), request.body.environments ?? []);
        return { status: 'ok' };
      },
    );

    admin.get(
      '/relay/nodes',
      { schema: { response: { 200: Type.Object({ nodes: Type.Array(RelayNodeView) }), ...authErrors } } },
      async () => {
        const seen = new Map((await store.liveRelayNodes(0)).map((n) => [n.url, n.lastSeen] as const));
        const cutoff = now() - config.relayPresenceTtlMs;
        return {
          nodes: config.relayUrls.map((url) => {
            const lastSeen = seen.get(url) ?? null;
            return { url, live: lastSeen !== null && lastSeen >= cutoff, last_seen: lastSeen };
          }),
        };
      },
    );
  });
}
