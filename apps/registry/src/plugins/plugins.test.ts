import { generateKeyPairSync } from 'node:crypto';
import Fastify from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { openSqliteStore, type RegistryStore } from '../store/index.js';
import auth from './auth.js';
import config from './config.js';
import relayNodes from './relay-nodes.js';
import store from './store.js';

const settings = {
  relayUrls: ['ws://127.0.0.1:1'],
  authorizationTtlMs: 60_000,
  relayUrlTtlMs: 3600_000,
  relayPresenceTtlMs: 30_000,
  metricsCacheMs: 5_000,
};

describe('registry plugins', () => {
  let db: RegistryStore | undefined;
  afterEach(async () => {
    await db?.close();
    db = undefined;
  });

  it('refuse to start without the plugins they depend on, naming the missing one', async () => {
    const app = Fastify();
    app.register(auth);
    await expect(app.ready()).rejects.toThrow(/config/);
    await app.close();
  });

  it('decorate the root instance, so that a route plugin registered after them sees their decorators', async () => {
    db = openSqliteStore(':memory:');
    const app = Fastify();
    await app.register(config, { config: settings, now: () => 1_000 });
    await app.register(store, { store: db });
    await app.register(relayNodes, { signingKey: generateKeyPairSync('ed25519') });
    await app.register(auth);
    await app.register(async (routes) => {
      routes.get('/nodes', async () => ({ nodes: await routes.liveRelayNodes(), now: routes.now() }));
    });
    expect((await app.inject({ url: '/nodes' })).json()).toEqual({ nodes: settings.relayUrls, now: 1_000 });
    expect(typeof app.requireRole).toBe('function');
    await app.close();
  });
});
