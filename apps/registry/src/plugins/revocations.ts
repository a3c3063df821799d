import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { pollRevocations, RevocationPusher, revocationWindowMs } from '../revocations.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** Pushes revocations to every relay node, best effort (see revocations.ts). */
    revocations: RevocationPusher;
  }
}

/**
 * Revocations told to the relay nodes: pushed by the routes that revoke, and found by polling the store for those
 * made elsewhere (the CLI, another replica). Closing waits for pushes in flight (each bounded by its timeout), so
 * that no socket outlives the app.
 */
export default fp(
  async (app: FastifyInstance, options: { pollMs?: number; pushTimeoutMs?: number }) => {
    app.decorate(
      'revocations',
      new RevocationPusher({
        relayUrls: app.config.relayUrls,
        signingKey: app.signingKey,
        log: app.log,
        now: app.now,
        ...(options.pushTimeoutMs ? { timeoutMs: options.pushTimeoutMs } : {}),
      }),
    );
    let stopPolling: (() => void) | undefined;
    app.addHook('onReady', async () => {
      stopPolling = pollRevocations(app.store, app.revocations, {
        intervalMs: options.pollMs ?? 2_000,
        windowMs: revocationWindowMs(app.config),
        now: app.now,
        log: app.log,
      });
    });
    app.addHook('preClose', async () => stopPolling?.());
    app.addHook('onClose', async () => app.revocations.settled());
  },
  { name: 'revocations', dependencies: ['config', 'store', 'relay-nodes'] },
);
