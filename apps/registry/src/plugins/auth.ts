import { createHash } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { RegistryError } from '../errors.js';
import type { ApiKeyRecord, LinkSession, Role } from '../store/types.js';
import { hashToken } from '../tokens.js';

/** Prefix of a browser session token (a browser grant exchanged; routes/browser.ts mints both). */
export const SESSION_PREFIX = 'tbws';

/** An onRequest hook that lets a request through or throws 401/403. */
export type AuthHook = (request: FastifyRequest) => Promise<void>;

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * onRequest hook for a route group: a known, unrevoked API key of exactly `role` (or one of `role`), else
     * 401/403. The key is then `request.apiKey`.
     */
    requireRole(role: Role | readonly Role[]): AuthHook;
    /**
     * The onRequest hook of `/connect`: a browser session token acts as the harness key that minted its grant,
     * scoped to exactly its environment (the scope check then refuses any other one); anything else must be a
     * harness or an admin key. Every other route looks tokens up as API keys only, so a session token is refused
     * there (401).
     */
    requireHarnessOrSession(): AuthHook;
    /** The known, unrevoked API key a request's bearer token is, or undefined (none, unknown, or revoked). */
    apiKeyOf(request: FastifyRequest): Promise<ApiKeyRecord | undefined>;
  }
  interface FastifyRequest {
    /** The API key the route's auth hook accepted (for a browser session: the key behind it). */
    apiKey: ApiKeyRecord | null;
    /** A share link's browser session (`harness share`): it may reach only shared processes. Else null. */
    linkSession: LinkSession | null;
  }
}

/** The bearer token of a request, or null; never logged. */
function bearer(request: FastifyRequest): string | null {
  const header = request.headers.authorization;
  if (typeof header !== 'string') return null;
  const match = /^Bearer ([\x21-\x7e]{1,512})$/.exec(header);
  return match ? (match[1] as string) : null;
}

/**
 * The id a share link's session is named by to the executor: derived from its token's stored hash (so the same for
 * every request of the session) and never the hash itself, which looks the session up.
 */
export function linkSessionId(sessionTokenHash: string): string {
  return `lnk_${createHash('sha256').update(`tether-link-session\n${sessionTokenHash}`).digest('hex').slice(0, 24)}`;
}

const SESSION_BEARER = new RegExp(`^Bearer (${SESSION_PREFIX}_[A-Za-z0-9_-]{1,100})$`);

/**
 * API keys and roles, and browser sessions: who a request is. The raw token is only hashed for the store look-up
 * (cached there), never kept or logged.
 */
export default fp(
  async (app: FastifyInstance) => {
    const { store } = app;
    app.decorateRequest('apiKey', null);
    app.decorateRequest('linkSession', null);

    const apiKeyOf = (request: FastifyRequest): Promise<ApiKeyRecord | undefined> => {
      const token = bearer(request);
      return token === null ? Promise.resolve(undefined) : store.findApiKey(hashToken(token));
    };
    app.decorate('apiKeyOf', apiKeyOf);

    const requireRole = (role: Role | readonly Role[]): AuthHook => {
      const roles: readonly Role[] = typeof role === 'string' ? [role] : role;
      const message = `this route needs ${roles.map((r) => `${/^[aeiou]/.test(r) ? 'an' : 'a'} ${r}`).join(' or ')} key`;
      return async (request) => {
        const key = await apiKeyOf(request);
        if (!key) throw new RegistryError('unauthorized');
        if (!roles.includes(key.role)) throw new RegistryError('forbidden_role', message);
        request.apiKey = key;
      };
    };
    app.decorate('requireRole', requireRole);

    app.decorate('requireHarnessOrSession', (): AuthHook => {
      // An admin key may /connect too (it may list and stop every key's detached processes; docs/security.md).
      const harnessKey = requireRole(['harness', 'admin']);
      return async (request) => {
        const header = request.headers.authorization;
        const token = typeof header === 'string' ? SESSION_BEARER.exec(header)?.[1] : undefined;
        if (token === undefined) return harnessKey(request);
        const session = await store.findBrowserSession(hashToken(token), app.now());
        if (!session) throw new RegistryError('unauthorized');
        // Environment ids hold no glob character, so the id as a glob matches exactly itself.
        request.apiKey = {
          id: session.apiKeyId,
          role: 'harness',
          environments: session.environmentId,
          label: 'browser session',
          createdAt: 0,
          revokedAt: null,
          relayUrl: null,
          // What the key may do is told at /validate, read from the key itself (its `access`).
          access: 'full',
        };
        if (session.shareAccess !== null) {
          request.linkSession = { id: linkSessionId(hashToken(token)), access: session.shareAccess };
        }
      };
    });
  },
  { name: 'auth', dependencies: ['config', 'store'] },
);
