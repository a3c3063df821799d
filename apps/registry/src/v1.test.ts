import { createPublicKey, generateKeyPairSync } from 'node:crypto';
import { generateIdentity, publicKeyToJson } from '@tether/noise';
import type { FastifyInstance } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { buildRegistry } from './app.js';
import { openSqliteStore, type RegistryStore, type Role } from './store/index.js';
import { generateToken, hashToken } from './tokens.js';

const NODES = ['ws://relay-a:1', 'ws://relay-b:1', 'ws://relay-c:1'];
const signing = generateKeyPairSync('ed25519');
const executorKey = publicKeyToJson(generateIdentity().publicKey);
const harnessKey = publicKeyToJson(generateIdentity().publicKey);
let store: RegistryStore;
let app: FastifyInstance;
let clock: number;
const tokens: Record<Role, string> = {
  executor: generateToken(),
  harness: generateToken(),
  admin: generateToken(),
  relay: generateToken(),
};

const as = (role: Role) => ({ authorization: `Bearer ${tokens[role]}` });
const register = (env: string) =>
  app.inject({
    method: 'POST',
    url: `/cloud/environment/${env}/register`,
    headers: as('executor'),
    payload: { security_profile: 'noise_hybrid_ik_v1', executor_public_key: executorKey },
  });
/** A harness key's /connect to `env`. */
const connect = (env: string) =>
  app.inject({
    method: 'POST',
    url: `/cloud/environment/${env}/connect`,
    headers: as('harness'),
    payload: { harness_public_key: harnessKey },
  });
const heartbeat = (url: string, role: Role = 'admin') =>
  app.inject({ method: 'POST', url: '/v1/relay/heartbeat', headers: as(role), payload: { url } });

beforeEach(async () => {
  store = openSqliteStore(':memory:');
  clock = 1_000_000;
  app = await buildRegistry(
    { relayUrls: NODES },
    { store, signingKey: { privateKey: signing.privateKey, publicKey: signing.publicKey }, now: () => clock },
  );
  for (const role of ['executor', 'harness', 'admin', 'relay'] as const) {
    await store.createApiKey({
      id: role,
      tokenHash: hashToken(tokens[role]),
      role,
      environments: role === 'relay' ? '' : '*',
      label: role,
      createdAt: 0,
      relayUrl: role === 'relay' ? 'ws://relay-b:1' : null,
    });
  }
});

afterEach(async () => {
  await app.close();
  await store.close();
});

describe('/v1', () => {
  it('GET /v1/relay-signing-key gives the public key only, without auth', async () => {
    const res = await app.inject('/v1/relay-signing-key');
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(Object.keys(body).sort()).toEqual(['algorithm', 'public_key', 'public_key_pem']);
    expect(body.public_key).toBe(signing.publicKey.export({ format: 'jwk' }).x);
    expect(createPublicKey(body.public_key_pem).export({ format: 'jwk' })).toEqual(
      signing.publicKey.export({ format: 'jwk' }),
    );
    expect(res.body).not.toContain('PRIVATE');
  });

  it('lists environments with their registration status (admin only)', async () => {
    const reg = (await register('env-1')).json();
    await register('env-2');
    await store.revokeRegistration('env-2', (await store.currentRegistration('env-2'))?.registrationId ?? '', clock);
    const res = await app.inject({ url: '/v1/environments', headers: as('admin') });
    expect(res.statusCode).toBe(200);
    const [one, two] = res.json().environments;
    expect(one).toEqual({
      environment_id: 'env-1',
      created_at: clock,
      registered: true,
      executor_registration_id: reg.executor_registration_id,
      registered_at: clock,
      epoch: 1,
      owner_key_id: 'executor',
      relay_node: new URL(reg.url).origin,
      relay_link: 'unknown',
      last_seen: null,
    });
    expect(two).toMatchObject({ environment_id: 'env-2', registered: false, executor_registration_id: null });
    for (const role of ['executor', 'harness'] as const) {
      expect((await app.inject({ url: '/v1/environments', headers: as(role) })).statusCode).toBe(403);
    }
    expect((await app.inject('/v1/environments')).statusCode).toBe(401);
  });

  it('revokes the current registration: /connect then refuses with 410 registration_revoked', async () => {
    const reg = (await register('env-1')).json();
    const path = `/v1/environments/env-1/registrations/${reg.executor_registration_id}`;
    expect((await app.inject({ method: 'DELETE', url: path, headers: as('executor') })).statusCode).toBe(403);
    const res = await app.inject({ method: 'DELETE', url: path, headers: as('admin') });
    expect([res.statusCode, res.json()]).toEqual([200, { status: 'revoked' }]);
    const again = await app.inject({ method: 'DELETE', url: path, headers: as('admin') });
    expect([again.statusCode, again.json().error.code]).toEqual([404, 'registration_not_found']);
    const refused = await connect('env-1');
    expect([refused.statusCode, refused.json().error.code]).toEqual([410, 'registration_revoked']);
    expect(refused.json().error.message).toMatch(/registration was revoked.*must register again/);
  });

  it('routes only to relay nodes with a recent heartbeat, all configured nodes while none reports', async () => {
    const hosts = async () => {
      const seen = new Set<string>();
      for (let i = 0; i < 30; i++) seen.add(new URL((await register(`env-${i}`)).json().url).host);
      return [...seen].sort();
    };
    expect(await hosts()).toEqual(['relay-a:1', 'relay-b:1', 'relay-c:1']);
    expect((await heartbeat('ws://relay-b:1')).json()).toEqual({ status: 'ok', revoked_registrations: [] });
    expect(await hosts()).toEqual(['relay-b:1']);
    clock += 20_000;
    await heartbeat('ws://relay-c:1');
    expect(await hosts()).toEqual(['relay-b:1', 'relay-c:1']);
    clock += 15_000; // relay-b's heartbeat is now 35 s old
    expect(await hosts()).toEqual(['relay-c:1']);
    const nodes = (await app.inject({ url: '/v1/relay/nodes', headers: as('admin') })).json().nodes;
    expect(nodes).toEqual([
      { url: 'ws://relay-a:1', live: false, last_seen: null },
      { url: 'ws://relay-b:1', live: false, last_seen: 1_000_000 },
      { url: 'ws://relay-c:1', live: true, last_seen: 1_020_000 },
    ]);
  });

  it('relay heartbeats report environment links: /connect answers 409 environment_offline when down', async () => {
    const link = async () =>
      (await app.inject({ url: '/v1/environments', headers: as('admin') })).json().environments[0];
    await register('env-1');
    expect((await connect('env-1')).statusCode).toBe(200);
    expect((await heartbeat('ws://relay-a:1')).statusCode).toBe(200);
    expect(await link()).toMatchObject({ relay_link: 'down', last_seen: null });
    const offline = await connect('env-1');
    expect([offline.statusCode, offline.json().error.code]).toEqual([409, 'environment_offline']);
    const unregistered = await connect('env-2');
    expect([unregistered.statusCode, unregistered.json().error.code]).toEqual([404, 'environment_not_registered']);
    const up = await app.inject({
      method: 'POST',
      url: '/v1/relay/heartbeat',
      headers: as('admin'),
      payload: { url: 'ws://relay-a:1', environments: ['env-1', 'env-9'] },
    });
    expect(up.statusCode).toBe(200);
    expect(await link()).toMatchObject({ relay_link: 'up', last_seen: clock });
    expect((await connect('env-1')).statusCode).toBe(200);
    clock += 5_000;
    await heartbeat('ws://relay-a:1'); // the next report no longer lists env-1
    expect(await link()).toMatchObject({ relay_link: 'down', last_seen: clock - 5_000 });
    expect((await connect('env-1')).statusCode).toBe(409);
    clock += 31_000; // no live node reports any more: unknown, and /connect is allowed again
    expect(await link()).toMatchObject({ relay_link: 'unknown' });
    expect((await connect('env-1')).statusCode).toBe(200);
    const bad = await app.inject({
      method: 'POST',
      url: '/v1/relay/heartbeat',
      headers: as('admin'),
      payload: { url: 'ws://relay-a:1', environments: ['bad id'] },
    });
    expect([bad.statusCode, bad.json().error.code]).toEqual([400, 'invalid_request']);
  });

  it('heartbeats need an admin or relay key and a configured node URL', async () => {
    expect((await heartbeat('ws://relay-a:1', 'executor')).statusCode).toBe(403);
    expect((await heartbeat('ws://relay-a:1', 'harness')).statusCode).toBe(403);
    const res = await heartbeat('ws://elsewhere:1');
    expect([res.statusCode, res.json().error.code]).toEqual([400, 'unknown_relay_node']);
  });
});

describe('/metrics', () => {
  it('exposes Prometheus counters and gauges', async () => {
    await register('env-1');
    await app.inject({ method: 'POST', url: '/cloud/environment/env-1/register', payload: {} });
    const res = await app.inject('/metrics');
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toContain('text/plain; version=0.0.4');
    expect(res.body).toContain('# TYPE registry_http_requests_total counter');
    expect(res.body).toContain(
      'registry_http_requests_total{method="POST",route="/cloud/environment/:id/register",status="200"} 1',
    );
    expect(res.body).toContain(
      'registry_http_requests_total{method="POST",route="/cloud/environment/:id/register",status="401"} 1',
    );
    expect(res.body).toContain('registry_registrations_total 1');
    expect(res.body).toContain('registry_registered_environments 1');
    expect(res.body).toContain('registry_relay_nodes_routable 3');
  });
});
