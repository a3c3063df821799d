import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { RegistryError } from '../errors.js';
import { REVOCATION_LIST_CAP, revocationWindowMs } from '../revocations.js';
import { authErrors, ErrorResponse, StatusResponse } from '../schemas.js';
import type { ApiKeyRecord, RevokedRegistrationRecord } from '../store/types.js';
import { ENVIRONMENT_ID_PATTERN } from '../tokens.js';

const EnvironmentView = Type.Object({
  environment_id: Type.String(),
  created_at: Type.Number(),
  registered: Type.Boolean(),
  executor_registration_id: Type.Union([Type.String(), Type.Null()]),
  registered_at: Type.Union([Type.Number(), Type.Null()]),
  epoch: Type.Union([Type.Number(), Type.Null()]),
  owner_key_id: Type.Union([Type.String(), Type.Null()]),
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

const RevokedRegistrationView = Type.Object({ environment_id: Type.String(), registration_id: Type.String() });
const revokedView = (records: readonly RevokedRegistrationRecord[]) =>
  records.map((r) => ({ environment_id: r.environmentId, registration_id: r.registrationId }));

const KeyParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 128 }) });
const OwnerBody = Type.Object(
  { api_key_id: Type.String({ minLength: 1, maxLength: 128 }) },
  { additionalProperties: false },
);

/** Our own API beside Codex's: the relay signing key (public), and admin views and actions. */
export async function v1Routes(app: FastifyInstance) {
  const { store, config, signingKey, now } = app;

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

  // Relay nodes heartbeat with a relay key bound to their URL (or, as before, an admin key).
  await app.register(async (relay) => {
    relay.addHook('onRequest', app.requireRole(['relay', 'admin']));

    relay.post<{ Body: { url: string; environments?: string[] } }>(
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
          response: {
            200: Type.Object({ status: Type.String(), revoked_registrations: Type.Array(RevokedRegistrationView) }),
            ...authErrors,
          },
        },
      },
      async (request) => {
        const key = request.apiKey as ApiKeyRecord;
        if (!config.relayUrls.includes(request.body.url)) throw new RegistryError('unknown_relay_node');
        if (key.role === 'relay' && key.relayUrl !== request.body.url) throw new RegistryError('forbidden_relay_node');
        const at = now();
        // The store links a reported environment here only when its current registration sent the executor here.
        await store.heartbeatRelayNode(request.body.url, at, request.body.environments ?? []);
        // Every revocation a relay could still hold a live URL of, newest first; it drops and refuses those.
        const revoked = await store.listRevokedRegistrations(at - revocationWindowMs(config), REVOCATION_LIST_CAP);
        return { status: 'ok', revoked_registrations: revokedView(revoked) };
      },
    );
  });

  await app.register(async (admin) => {
    admin.addHook('onRequest', app.requireRole('admin'));

    admin.get(
      '/environments',
      { schema: { response: { 200: Type.Object({ environments: Type.Array(EnvironmentView) }), ...authErrors } } },
      async () => {
        const environments = await store.listEnvironments();
        const routes = await Promise.all(environments.map((e) => app.relayRoute(e.registration)));
        return {
          environments: environments.map((e, i) => ({
            environment_id: e.environmentId,
            created_at: e.createdAt,
            registered: e.registration !== null,
            executor_registration_id: e.registration?.registrationId ?? null,
            registered_at: e.registration?.createdAt ?? null,
            epoch: e.registration?.epoch ?? null,
            owner_key_id: e.ownerKeyId,
            relay_node: routes[i]?.node ?? null,
            relay_link: routes[i]?.status ?? 'unknown',
            last_seen: routes[i]?.lastSeen ?? null,
          })),
        };
      },
    );

    admin.delete<{ Params: { id: string; registration_id: string } }>(
      '/environments/:id/registrations/:registration_id',
      { schema: { params: RevokeParams, response: { 200: StatusResponse, ...authErrors, 404: ErrorResponse } } },
      async (request) => {
        const revoked = await store.revokeRegistration(request.params.id, request.params.registration_id, now());
        if (!revoked) throw new RegistryError('registration_not_found');
        app.revocations.push([revoked]);
        request.log.info({ environmentId: request.params.id }, 'registration revoked');
        return { status: 'revoked' };
      },
    );

    // The key and every current registration made with it, in one store step; relays are told at once.
    admin.delete<{ Params: { id: string } }>(
      '/keys/:id',
      {
        schema: {
          params: KeyParams,
          response: {
            200: Type.Object({ status: Type.String(), revoked_registrations: Type.Array(RevokedRegistrationView) }),
            ...authErrors,
            404: ErrorResponse,
          },
        },
      },
      async (request) => {
        const revoked = await store.revokeApiKey(request.params.id, now());
        if (!revoked) throw new RegistryError('key_not_found');
        app.revocations.push(revoked.registrations);
        request.log.info({ keyId: request.params.id, registrations: revoked.registrations.length }, 'API key revoked');
        return { status: 'revoked', revoked_registrations: revokedView(revoked.registrations) };
      },
    );

    // Binds an environment (created if unknown) to another executor key: the next registration must use it.
    admin.post<{ Params: { id: string }; Body: { api_key_id: string } }>(
      '/environments/:id/owner',
      {
        schema: {
          params: Type.Object({ id: Type.String({ pattern: ENVIRONMENT_ID_PATTERN }) }),
          body: OwnerBody,
          response: { 200: StatusResponse, ...authErrors },
        },
      },
      async (request) => {
        if (!(await store.setEnvironmentOwner(request.params.id, request.body.api_key_id, now()))) {
          throw new RegistryError('invalid_owner_key');
        }
        request.log.info(
          { environmentId: request.params.id, keyId: request.body.api_key_id },
          'environment transferred',
        );
        return { status: 'transferred' };
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
