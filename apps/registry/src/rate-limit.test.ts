import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { createKey, newSigningKey } from './__tests__/app-fixture.js';
import { buildRegistry, type RegistryConfig } from './app.js';
import { openSqliteStore, type RegistryStore } from './store/index.js';
import { generateToken } from './tokens.js';

let store: RegistryStore;
let app: FastifyInstance;
const tokens: Record<string, string> = {};

async function start(config: Partial<RegistryConfig> = {}) {
  store = openSqliteStore(':memory:');
  app = await buildRegistry({ relayUrls: ['ws://127.0.0.1:1'], ...config }, { store, signingKey: newSigningKey() });
  for (const id of ['admin', 'admin2']) {
    tokens[id] = await createKey(store, { id, role: 'admin', environments: '*', label: id, createdAt: 1 });
  }
}

afterEach(async () => {
  await app?.close();
  await store?.close();
});

const exchange = (ip = '203.0.113.7', headers: Record<string, string> = {}) =>
  app.inject({
    method: 'POST',
    url: '/cloud/browser-grants/exchange',
    remoteAddress: ip,
    headers,
    payload: { grant: `tbgr_${'A'.repeat(43)}` },
  });
const listKeys = (key: string, ip = '203.0.113.7') =>
  app.inject({ url: '/v1/environments', remoteAddress: ip, headers: { authorization: `Bearer ${tokens[key]}` } });
const rateLimited = async () =>
  (await app.inject({ url: '/metrics' })).body.split('\n').filter((l) => l.startsWith('registry_rate_limited_total'));

describe('rate limits', () => {
  it('an unauthenticated burst past the per-address limit gets 429 with Retry-After, counted in /metrics', async () => {
    await start({ rateLimit: { unauthenticated: 3, perKey: 100 } });
    for (let i = 0; i < 3; i++) expect((await exchange()).statusCode).toBe(401);
    const refused = await exchange();
    expect(refused.statusCode).toBe(429);
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
    expect(refused.json().error.code).toBe('rate_limited');
    expect((await exchange()).statusCode).toBe(429);
    // Another address has its own budget.
    expect((await exchange('198.51.100.9')).statusCode).toBe(401);
    const lines = await rateLimited();
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/reason="address"/);
    expect(lines[0]).toMatch(/route="\/cloud\/browser-grants\/exchange"/);
    expect(lines[0]).toMatch(/ 2$/);
  });

  it('authenticated requests are limited per API key, whatever the address', async () => {
    await start({ rateLimit: { unauthenticated: 100, perKey: 2 } });
    expect((await listKeys('admin', '203.0.113.1')).statusCode).toBe(200);
    expect((await listKeys('admin', '203.0.113.2')).statusCode).toBe(200);
    const refused = await listKeys('admin', '203.0.113.3');
    expect(refused.statusCode).toBe(429);
    expect(refused.headers['retry-after']).toBeDefined();
    expect((await listKeys('admin2', '203.0.113.3')).statusCode).toBe(200);
    const lines = await rateLimited();
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/reason="api_key"/);
    expect(lines[0]).toMatch(/route="\/v1\/environments"/);
  });

  it('an unknown bearer token counts against its address, not a fresh bucket per token', async () => {
    await start({ rateLimit: { unauthenticated: 2, perKey: 100 } });
    const bogus = () => ({ authorization: `Bearer ${generateToken()}` });
    expect((await exchange(undefined, bogus())).statusCode).toBe(401);
    expect((await exchange(undefined, bogus())).statusCode).toBe(401);
    expect((await exchange(undefined, bogus())).statusCode).toBe(429);
  });

  it('a store that cannot look the key up leaves the request to its address: /livez still answers', async () => {
    await start({ rateLimit: { unauthenticated: 100, perKey: 100 } });
    store.findApiKey = () => Promise.reject(new Error('store down'));
    const res = await app.inject({ url: '/livez', headers: { authorization: `Bearer ${tokens.admin}` } });
    expect(res.statusCode).toBe(200);
  });

  it('with --trust-proxy the address is the forwarded client’s; from others X-Forwarded-For is ignored', async () => {
    await start({ rateLimit: { unauthenticated: 1, perKey: 100 }, trustProxy: ['10.0.0.0/8'] });
    const via = (proxy: string, client: string) => exchange(proxy, { 'x-forwarded-for': client });
    expect((await via('10.0.0.1', '203.0.113.1')).statusCode).toBe(401);
    expect((await via('10.0.0.1', '203.0.113.2')).statusCode).toBe(401);
    expect((await via('10.0.0.1', '203.0.113.1')).statusCode).toBe(429);
    expect((await via('198.51.100.1', '203.0.113.3')).statusCode).toBe(401);
    expect((await via('198.51.100.1', '203.0.113.4')).statusCode).toBe(429);
  });

  it('below the default limits nothing changes: no 429, no counter', async () => {
    await start();
    for (let i = 0; i < 50; i++) expect((await exchange()).statusCode).toBe(401);
    for (let i = 0; i < 50; i++) expect((await listKeys('admin')).statusCode).toBe(200);
    expect(await rateLimited()).toEqual([]);
  });
});
