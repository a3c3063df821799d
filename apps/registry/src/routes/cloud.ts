import { randomBytes } from 'node:crypto';
import { type NoisePublicKeyJson, parsePublicKey, publicKeyToJson, SECURITY_PROFILE_HYBRID_IK_V1 } from '@tether/noise';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { BoundedCache } from '../cache.js';
import { RegistryError } from '../errors.js';
import {
  authErrors,
  ConnectBody,
  ConnectResponse,
  EnvironmentParams,
  ErrorResponse,
  RegisterBody,
  RegisterResponse,
  ValidateBody,
  ValidateResponse,
} from '../schemas.js';
import { generateToken, hashToken, matchesEnvironmentGlob } from '../tokens.js';

/** On a `/validate` answer: the request id of the `/connect` that issued the authorization it consumed. */
export const CONNECT_REQUEST_ID_HEADER = 'x-tether-connect-request-id';

/**
 * On a `/validate` answer that says yes: the API key that minted the authorization at `/connect` (its id,
 * percent-encoded, and its role), so the executor knows whose the harness's detached processes are. Headers, not
 * body fields: Codex's executor ignores them (and its strict body decoding would not ignore a new field).
 */
export const HARNESS_KEY_ID_HEADER = 'x-tether-harness-key-id';
export const HARNESS_KEY_ROLE_HEADER = 'x-tether-harness-key-role';
/** `view` when that key is view-only (`keys create --access view`): the harness may only watch shared processes. */
export const HARNESS_KEY_ACCESS_HEADER = 'x-tether-harness-key-access';
/**
 * On a `/validate` answer for a harness of a share link's browser session (`harness share`): the session's id and
 * the most it may do (`view` or `control`). The executor treats it as a principal of its own that reaches only
 * processes shared with it, by their tokens.
 */
export const HARNESS_LINK_SESSION_HEADER = 'x-tether-harness-link-session';
export const HARNESS_LINK_ACCESS_HEADER = 'x-tether-harness-link-access';

/** Canonical JSON of a NoiseChannelPublicKey (strict codec, fixed field order), or null when invalid. */
function parseCanonicalKey(value: unknown): string | null {
  try {
    return JSON.stringify(publicKeyToJson(parsePublicKey(value)));
  } catch {
    return null;
  }
}

/**
 * A harness key as /connect binds it and /validate compares it: its key material only. The suite is the
 * executor's choice: a harness sends /connect before its bundle names the suite, and the executor reports the
 * harness key under its own suite, so a label compared here would refuse every harness of a ChaChaPoly
 * executor. The handshake binds the suite (its protocol name is hashed in); the key bytes are the identity.
 */
function harnessKeyIdentity(canonical: string | null): string | null {
  if (canonical === null) return null;
  const key = JSON.parse(canonical) as NoisePublicKeyJson;
  return JSON.stringify({ x25519_public_key: key.x25519_public_key, mlkem768_public_key: key.mlkem768_public_key });
}

const KEY_FIELDS = ['suite', 'x25519_public_key', 'mlkem768_public_key'] as const;

/**
 * parseCanonicalKey, memoised for the common input (an object of exactly the three string fields): the same harness
 * key arrives in every /connect and /validate of a session, and decoding it is a good part of a request's CPU.
 * The memo is exact (a pure function of the three strings); anything else is parsed every time.
 */
function canonicalKeyMemo() {
  const memo = new BoundedCache<string, string>(512);
  return (value: unknown): string | null => {
    if (typeof value !== 'object' || value === null || Array.isArray(value) || Object.keys(value).length !== 3) {
      return parseCanonicalKey(value);
    }
    const record = value as Record<string, unknown>;
    const fields: string[] = [];
    for (const field of KEY_FIELDS) {
      const v = Object.hasOwn(record, field) ? record[field] : undefined;
      if (typeof v !== 'string') return parseCanonicalKey(value);
      fields.push(v);
    }
    // Only valid keys are memoised and none of their fields holds a newline, so this join is unambiguous.
    const memoKey = fields.join('\n');
    const hit = memo.get(memoKey);
    if (hit !== undefined) return hit;
    const canonical = parseCanonicalKey(value);
    if (canonical !== null) memo.set(memoKey, canonical);
    return canonical;
  };
}

/** The Codex registry contract (rendezvous.md §1): register, connect, validate. */
export async function cloudRoutes(app: FastifyInstance) {
  const { store, config, now } = app;
  const canonicalKey = canonicalKeyMemo();
  // The stored executor key, parsed once per distinct value (the response serializer only reads it).
  const parsedKeys = new BoundedCache<string, NoisePublicKeyJson>(512);
  const parsedKey = (json: string) => {
    let parsed = parsedKeys.get(json);
    if (parsed === undefined) {
      parsed = JSON.parse(json) as NoisePublicKeyJson;
      parsedKeys.set(json, parsed);
    }
    return parsed;
  };

  const inScope = async (request: FastifyRequest<{ Params: EnvironmentParams }>) => {
    if (!request.apiKey || !matchesEnvironmentGlob(request.apiKey.environments, request.params.id)) {
      throw new RegistryError('forbidden_environment');
    }
  };

  /** Why an environment has no current registration: revoked (the executor must re-register) or never registered. */
  const noRegistration = async (environmentId: string) =>
    new RegistryError(
      (await store.registrationRevoked(environmentId)) ? 'registration_revoked' : 'environment_not_registered',
    );

  await app.register(async (executor) => {
    executor.addHook('onRequest', app.requireRole('executor'));
    executor.addHook('preHandler', inScope);

    executor.post<{ Params: EnvironmentParams; Body: RegisterBody }>(
      '/:id/register',
      {
        schema: {
          params: EnvironmentParams,
          body: RegisterBody,
          response: { 200: RegisterResponse, ...authErrors, 503: ErrorResponse },
        },
      },
      async (request) => {
        const environmentId = request.params.id;
        if (request.body.security_profile !== SECURITY_PROFILE_HYBRID_IK_V1) {
          throw new RegistryError('unsupported_security_profile');
        }
        const executorPublicKey = canonicalKey(request.body.executor_public_key);
        if (executorPublicKey === null) throw new RegistryError('invalid_public_key');
        const registrationId = `reg_${randomBytes(16).toString('base64url')}`;
        // Picked first: with no relay to send the executor to, nothing is stored. An executor failing over names
        // the node it could not reach (Tether's field; Codex sends none).
        const base = await app.registrationNode(environmentId, request.body.unreachable_relay_url);
        // The ownership check, the key's liveness and the epoch are one store step with the replacement.
        const stored = await store.putRegistration({
          environmentId,
          registrationId,
          securityProfile: SECURITY_PROFILE_HYBRID_IK_V1,
          executorPublicKey,
          apiKeyId: (request.apiKey as { id: string }).id,
          createdAt: now(),
          relayUrl: base,
        });
        if (!stored.ok) {
          request.log.warn({ environmentId, reason: stored.reason }, 'registration refused');
          throw new RegistryError(stored.reason === 'environment_owned' ? 'environment_owned' : 'unauthorized');
        }
        const url = app.relayUrl(base, 'environment', { environmentId, registrationId, epoch: stored.epoch });
        app.metrics.inc('registry_registrations_total');
        request.log.info(
          { environmentId, registrationId, epoch: stored.epoch, relayNode: base },
          'executor registered',
        );
        return {
          environment_id: environmentId,
          url,
          security_profile: SECURITY_PROFILE_HYBRID_IK_V1,
          executor_registration_id: registrationId,
        };
      },
    );

    executor.post<{ Params: EnvironmentParams; Body: ValidateBody }>(
      '/:id/validate',
      { schema: { params: EnvironmentParams, body: ValidateBody, response: { 200: ValidateResponse, ...authErrors } } },
      async (request, reply) => {
        const environmentId = request.params.id;
        const body = request.body;
        const harnessPublicKey = harnessKeyIdentity(canonicalKey(body.harness_public_key));
        // One statement: the authorization is consumed only while the registration it names is the environment's
        // current one and was made with this executor key (otherwise it survives the attempt).
        const consumed =
          harnessPublicKey !== null &&
          (await store.consumeAuthorization({
            tokenHash: hashToken(body.harness_key_authorization),
            environmentId,
            registrationId: body.executor_registration_id,
            harnessPublicKey,
            now: now(),
            apiKeyId: (request.apiKey as { id: string }).id,
          }));
        const valid = consumed !== false && consumed !== null;
        app.metrics.inc('registry_validations_total', { result: valid ? 'valid' : 'invalid' });
        // The id of the /connect that issued the authorization: one id from the harness's connect to here, and
        // on to the executor's log (a header Codex's executor ignores).
        const connectRequestId = valid ? consumed.connectRequestId : null;
        if (connectRequestId !== null) reply.header(CONNECT_REQUEST_ID_HEADER, connectRequestId);
        // Who the harness acts for: the key that minted the authorization, only on a yes, and only a role that may
        // /connect (the executor owns detached processes by it). An authorization stored before the key was
        // recorded names none: the executor then treats the harness as unattributed.
        const mintedBy = valid ? consumed.mintedByKeyId : null;
        const mintedByRole = valid ? consumed.mintedByRole : null;
        if (mintedBy !== null && (mintedByRole === 'harness' || mintedByRole === 'admin')) {
          reply.header(HARNESS_KEY_ID_HEADER, encodeURIComponent(mintedBy));
          reply.header(HARNESS_KEY_ROLE_HEADER, mintedByRole);
          // A view-only key's harness may only watch what is shared with it (the executor enforces it).
          if (valid && consumed.mintedByAccess === 'view') reply.header(HARNESS_KEY_ACCESS_HEADER, 'view');
          const link = valid ? consumed.linkSession : null;
          if (link !== null) {
            reply.header(HARNESS_LINK_SESSION_HEADER, link.id);
            reply.header(HARNESS_LINK_ACCESS_HEADER, link.access);
          }
        }
        request.log.info({ environmentId, valid, connectRequestId, mintedBy }, 'harness key validation');
        return { valid };
      },
    );
  });

  await app.register(async (harness) => {
    // A harness or admin key, or a browser session token for exactly this environment (browser.ts).
    harness.addHook('onRequest', app.requireHarnessOrSession());
    harness.addHook('preHandler', inScope);

    harness.post<{ Params: EnvironmentParams; Body: ConnectBody }>(
      '/:id/connect',
      {
        schema: {
          params: EnvironmentParams,
          body: ConnectBody,
          response: {
            200: ConnectResponse,
            ...authErrors,
            404: ErrorResponse,
            409: ErrorResponse,
            410: ErrorResponse,
            503: ErrorResponse,
          },
        },
      },
      async (request) => {
        const environmentId = request.params.id;
        const harnessPublicKey = harnessKeyIdentity(canonicalKey(request.body.harness_public_key));
        if (harnessPublicKey === null) throw new RegistryError('invalid_public_key');
        const authorization = generateToken('thka');
        // The registration lookup and the authorization for it are one store step (one PostgreSQL round trip).
        const current = await store.createAuthorizationForCurrent({
          tokenHash: hashToken(authorization),
          environmentId,
          harnessPublicKey,
          expiresAt: now() + config.authorizationTtlMs,
          connectRequestId: request.id,
          // The key that minted it (a harness key, or the one behind a browser session): revoking it voids it.
          mintedByKeyId: (request.apiKey as { id: string }).id,
          linkSession: request.linkSession,
        });
        if (!current) throw await noRegistration(environmentId);
        // To the node the executor was sent to, never to one a hash would pick now. While that node is dead or does
        // not carry the executor (it is away, or failing over to a live node), say so: the harness retries, and the
        // authorization just made expires unused.
        const route = await app.relayRoute(current);
        if (route.status === 'down' || route.node === null) throw new RegistryError('environment_offline');
        const url = app.relayUrl(route.node, 'harness', current);
        app.metrics.inc('registry_bundles_total');
        request.log.info({ environmentId, registrationId: current.registrationId }, 'harness bundle issued');
        return {
          environment_id: environmentId,
          url,
          security_profile: current.securityProfile,
          executor_registration_id: current.registrationId,
          executor_public_key: parsedKey(current.executorPublicKey),
          harness_key_authorization: authorization,
        };
      },
    );
  });
}
