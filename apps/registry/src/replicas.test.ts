import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { generateIdentity, publicKeyToJson } from '@tether/noise';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { buildRegistry } from './app.js';
import { openPostgresStore, type RegistryStore } from './store/index.js';
import { generateToken, hashToken } from './tokens.js';

// Two registry replicas sharing one PostgreSQL schema (and one signing key), as in a multi-replica deployment.
const PG_URL = process.env.TETHER_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `registry_test_${randomBytes(6).toString('hex')}`;
const signing = generateKeyPairSync('ed25519');
const stores: RegistryStore[] = [];
const apps: FastifyInstance[] = [];
const executorToken = generateToken();
const harnessToken = generateToken();
const harnessKey = publicKeyToJson(generateIdentity().publicKey);

beforeAll(async () => {
  for (let i = 0; i < 2; i++) {
    const store = await openPostgresStore({ connectionString: PG_URL, schema, max: 8 });
    stores.push(store);
    apps.push(
      await buildRegistry(
        { relayUrls: ['ws://relay:1'] },
        { store, signingKey: { privateKey: signing.privateKey, publicKey: signing.publicKey } },
      ),
    );
  }
  const [store] = stores as [RegistryStore];
  for (const [id, token, role] of [
    ['e', executorToken, 'executor'],
    ['h', harnessToken, 'harness'],
  ] as const) {
    await store.createApiKey({ id, tokenHash: hashToken(token), role, environments: '*', label: id, createdAt: 0 });
  }
});

afterAll(async () => {
  for (const app of apps) await app.close();
  for (const store of stores) await store.close();
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await client.end();
});

it('an authorization validates once across two replicas under concurrent /validate calls', async () => {
  const [a, b] = apps as [FastifyInstance, FastifyInstance];
  const reg = await a.inject({
    method: 'POST',
    url: '/cloud/environment/env-1/register',
    headers: { authorization: `Bearer ${executorToken}` },
    payload: {
      security_profile: 'noise_hybrid_ik_v1',
      executor_public_key: publicKeyToJson(generateIdentity().publicKey),
    },
  });
  expect(reg.statusCode).toBe(200);
  for (let round = 0; round < 5; round++) {
    const bundle = await b.inject({
      method: 'POST',
      url: '/cloud/environment/env-1/connect',
      headers: { authorization: `Bearer ${harnessToken}` },
      payload: { harness_public_key: harnessKey },
    });
    expect(bundle.statusCode).toBe(200);
    const payload = {
      executor_registration_id: reg.json().executor_registration_id,
      harness_public_key: harnessKey,
      harness_key_authorization: bundle.json().harness_key_authorization,
    };
    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        (i % 2 ? a : b).inject({
          method: 'POST',
          url: '/cloud/environment/env-1/validate',
          headers: { authorization: `Bearer ${executorToken}` },
          payload,
        }),
      ),
    );
    expect(answers.map((r) => r.statusCode)).toEqual(Array(12).fill(200));
    expect(answers.filter((r) => r.json().valid === true)).toHaveLength(1);
  }
});
