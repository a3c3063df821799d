import { nonceForGrant, type RelayRole, type SigningKey, signRelayUrl } from '@tether/relay-auth';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { BoundedCache } from '../cache.js';
import { RegistryError } from '../errors.js';
import { pickRegistrationNode, type RelayRoute, routeToExecutor } from '../routing.js';
import type { RegistrationRecord } from '../store/types.js';

/** What a signed relay URL is for: the registration it belongs to. */
export interface RelayGrantOf {
  environmentId: string;
  registrationId: string;
  epoch: number;
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The relay signing key: signs relay URLs and pushed revocations; its public half is on /v1. */
    signingKey: SigningKey;
    /**
     * Relay nodes to route to: the configured nodes with a recent heartbeat, or all configured nodes while
     * none has reported (a deployment without heartbeats still works).
     */
    liveRelayNodes(): Promise<string[]>;
    /**
     * Where a harness of this registration must go, and whether the executor is there: the node the registration
     * sent the executor to (by hash over the live nodes for a registration that names none). `up` when that node
     * is live and listed the environment in its latest heartbeat, `down` when nodes report but that one is not
     * live or does not list it (its executor is away, or failing over to another node), `unknown` when no node
     * reports (a deployment without heartbeats).
     */
    relayRoute(registration: Pick<RegistrationRecord, 'environmentId' | 'relayUrl'> | null): Promise<RelayRoute>;
    /**
     * The node a registering executor is sent to (rendezvous hashing over the live nodes, minus the one it says it
     * could not reach); 503 `no_relay_available` when there is none.
     */
    registrationNode(environmentId: string, unreachable: string | undefined): Promise<string>;
    /**
     * A signed relay URL for `registration` on node `base`. The executor's lives relayUrlTtlMs (it holds its
     * socket for long); a harness's lives as long as the authorization issued with it (rounded up to the second),
     * so a leaked harness URL is worthless soon after. Each harness URL is a grant of its own (a fresh nonce): a
     * relay bounds the sockets one grant may hold, so two bundles issued in the same second must not share one.
     */
    relayUrl(base: string, role: RelayRole, registration: RelayGrantOf): string;
  }
}

/** The relay nodes: which are live, where an environment is routed, and the URLs signed for them. */
export default fp(
  async (app: FastifyInstance, options: { signingKey: SigningKey }) => {
    const { config, store, now } = app;
    const { signingKey } = options;
    app.decorate('signingKey', signingKey);

    const liveRelayNodes = async () => {
      const seen = await store.liveRelayNodes(now() - config.relayPresenceTtlMs);
      const live = config.relayUrls.filter((url) => seen.some((node) => node.url === url));
      return live.length > 0 ? live : config.relayUrls;
    };
    app.decorate('liveRelayNodes', liveRelayNodes);

    app.decorate('relayRoute', async (registration: Pick<RegistrationRecord, 'environmentId' | 'relayUrl'> | null) => {
      if (!registration) return { node: null, status: 'unknown' as const, lastSeen: null };
      const [seen, link] = await Promise.all([
        store.liveRelayNodes(now() - config.relayPresenceTtlMs),
        store.relayLink(registration.environmentId),
      ]);
      return routeToExecutor(registration, config.relayUrls, seen, link);
    });

    app.decorate('registrationNode', async (environmentId: string, unreachable: string | undefined) => {
      const base = pickRegistrationNode(await liveRelayNodes(), environmentId, unreachable);
      if (!base) throw new RegistryError('no_relay_available');
      return base;
    });

    // Ed25519 signatures are deterministic, so an environment grant signed again within the same second (expiry has
    // 1 s resolution) is the same URL: reuse it rather than sign again. Harness URLs are never reused (each carries
    // a nonce of its own).
    const signedUrls = new BoundedCache<string, string>(1024);
    app.decorate('relayUrl', (base: string, role: RelayRole, registration: RelayGrantOf) => {
      const { environmentId, registrationId, epoch } = registration;
      if (role === 'harness') {
        const expiresAt = Math.ceil((now() + config.authorizationTtlMs) / 1000);
        const grant = { role, environmentId, registrationId, epoch, expiresAt, nonce: nonceForGrant() };
        return signRelayUrl(base, grant, signingKey);
      }
      const expiresAt = Math.floor((now() + config.relayUrlTtlMs) / 1000);
      const memoKey = `${base}\n${role}\n${environmentId}\n${registrationId}\n${epoch}\n${expiresAt}`;
      let url = signedUrls.get(memoKey);
      if (url === undefined) {
        url = signRelayUrl(base, { role, environmentId, registrationId, epoch, expiresAt }, signingKey);
        signedUrls.set(memoKey, url);
      }
      return url;
    });
  },
  { name: 'relay-nodes', dependencies: ['config', 'store'] },
);
