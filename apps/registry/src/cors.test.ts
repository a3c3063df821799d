import { generateIdentity, publicKeyToJson } from '@tether/noise';
import type { FastifyInstance } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createKey, newSigningKey } from './__tests__/app-fixture.js';
import { buildRegistry } from './app.js';
import { openSqliteStore, type RegistryStore } from './store/index.js';

const UI = 'https://ui.example';
const harnessKey = publicKeyToJson(generateIdentity().publicKey);
let store: RegistryStore;
let app: FastifyInstance;
let token: string;

async function build(uiOrigins: string[]) {
  app = await buildRegistry({ relayUrls: ['ws://127.0.0.1:1'], uiOrigins }, { store, signingKey: newSigningKey() });
}

beforeEach(async () => {
  store = openSqliteStore(':memory:');
  token = await createKey(store, { id: 'h', role: 'harness', environments: 'dev-*', label: '', createdAt: 1 });
});

afterEach(async () => {
  await app.close();
  await store.close();
});

const preflight = (url: string, origin: string) =>
  app.inject({
    method: 'OPTIONS',
    url,
    headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization' },
  });
const connect = (origin: string, bearer = token) =>
  app.inject({
    method: 'POST',
    url: '/cloud/environment/dev-1/connect',
    headers: { origin, authorization: `Bearer ${bearer}` },
    payload: { harness_public_key: harnessKey },
  });

describe('CORS (--ui-origin)', () => {
  it('answers preflights and adds the origin on /connect and the exchange, for that exact origin', async () => {
    await build([UI, 'http://127.0.0.1:5173']);
    for (const url of ['/cloud/environment/dev-1/connect', '/cloud/browser-grants/exchange']) {
      const response = await preflight(url, UI);
      expect(response.statusCode, url).toBe(204);
      expect(response.headers['access-control-allow-origin']).toBe(UI);
      expect(response.headers['access-control-allow-methods']).toBe('POST');
      expect(response.headers['access-control-allow-headers']).toBe('authorization, content-type, x-request-id');
      expect(response.headers.vary).toBe('origin');
    }
    // The environment has no executor: a 404 the page must still be able to read.
    const answer = await connect(UI);
    expect(answer.statusCode).toBe(404);
    expect(answer.headers['access-control-allow-origin']).toBe(UI);
    expect(answer.headers.vary).toBe('origin');
    const refused = await connect(UI, 'treg_wrong');
    expect(refused.statusCode).toBe(401);
    expect(refused.headers['access-control-allow-origin']).toBe(UI);
  });

  it('gives any other origin, and any other route, no CORS header', async () => {
    await build([UI]);
    for (const origin of ['https://evil.example', 'https://ui.example.evil', 'http://ui.example', 'null']) {
      const response = await preflight('/cloud/environment/dev-1/connect', origin);
      expect(response.statusCode, origin).toBe(404);
      expect(response.headers['access-control-allow-origin'], origin).toBeUndefined();
      const answer = await connect(origin);
      expect(answer.statusCode).toBe(404);
      expect(answer.headers['access-control-allow-origin'], origin).toBeUndefined();
    }
    const other = await app.inject({
      method: 'POST',
      url: '/cloud/environment/dev-1/register',
      headers: { origin: UI, authorization: `Bearer ${token}` },
      payload: {},
    });
    expect(other.headers['access-control-allow-origin']).toBeUndefined();
    expect((await preflight('/cloud/environment/dev-1/register', UI)).statusCode).toBe(404);
    expect((await preflight('/v1/environments', UI)).headers['access-control-allow-origin']).toBeUndefined();
  });

  it('registers nothing without --ui-origin', async () => {
    await build([]);
    const response = await preflight('/cloud/environment/dev-1/connect', UI);
    expect(response.statusCode).toBe(404);
    expect(response.headers['access-control-allow-origin']).toBeUndefined();
    expect((await connect(UI)).headers['access-control-allow-origin']).toBeUndefined();
  });
});
