import { generateKeyPairSync } from 'node:crypto';
import { connect as tcpConnect } from 'node:net';
import { generateIdentity, publicKeyToJson, SUITE_HYBRID_AESGCM, SUITE_HYBRID_CHACHAPOLY } from '@tether/noise';
import { type RelayGrant, type SigningKey, verifyRelayUrl } from '@tether/relay-auth';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createKey, logCapture } from './__tests__/app-fixture.js';
import { buildRegistry } from './app.js';
import { openSqliteStore, type RegistryStore, type Role } from './store/index.js';

const executorKey = publicKeyToJson(generateIdentity().publicKey);
const harnessKey = publicKeyToJson(generateIdentity().publicKey);
const otherHarnessKey = publicKeyToJson(generateIdentity().publicKey);

let store: RegistryStore;
let app: FastifyInstance;
let signingKey: SigningKey;
let clock: number;
let logs: ReturnType<typeof logCapture>;
let tokens: Record<string, string>;

async function addKey(name: string, role: Role, environments: string) {
  const token = await createKey(store, { id: name, role, environments, label: name, createdAt: clock });
  tokens[name] = token;
  return token;
}

const auth = (name: string) => ({ authorization: `Bearer ${tokens[name]}` });

function post(path: string, key: string | null, payload: unknown) {
  return app.inject({ method: 'POST', url: path, headers: key === null ? {} : auth(key), payload: payload as object });
}

const register = (env = 'dev-1', key = 'exec') =>
  post(`/cloud/environment/${env}/register`, key, {
    security_profile: 'noise_hybrid_ik_v1',
    executor_public_key: executorKey,
  });
const connect = (env = 'dev-1', key = 'harness', harness: unknown = harnessKey) =>
  post(`/cloud/environment/${env}/connect`, key, { harness_public_key: harness });
const validate = (env: string, body: Record<string, unknown>, key = 'exec') =>
  post(`/cloud/environment/${env}/validate`, key, body);

beforeEach(async () => {
  store = openSqliteStore(':memory:');
  const pair = generateKeyPairSync('ed25519');
  signingKey = { privateKey: pair.privateKey, publicKey: pair.publicKey };
  clock = 1_700_000_000_000;
  logs = logCapture();
  tokens = {};
  app = await buildRegistry(
    { relayUrls: ['ws://relay-a:8081', 'ws://relay-b:8081'] },
    { store, signingKey, now: () => clock, logger: pino({ level: 'trace' }, logs.stream) },
  );
  await addKey('exec', 'executor', 'dev-*');
  await addKey('exec2', 'executor', '*');
  await addKey('harness', 'harness', 'dev-*');
  await addKey('admin', 'admin', '*');
  await addKey('prod-harness', 'harness', 'prod-*');
});

afterEach(async () => {
  await app.close();
  await store.close();
});

describe('POST /cloud/environment/:id/register', () => {
  it('stores the registration and returns a signed environment relay URL', async () => {
    const res = await register();
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(Object.keys(body).sort()).toEqual(['environment_id', 'executor_registration_id', 'security_profile', 'url']);
    expect(body.environment_id).toBe('dev-1');
    expect(body.security_profile).toBe('noise_hybrid_ik_v1');
    expect(body.executor_registration_id).toMatch(/^reg_/);
    const grant = verifyRelayUrl(body.url, signingKey.publicKey, clock / 1000);
    expect(grant).toEqual<RelayGrant>({
      role: 'environment',
      environmentId: 'dev-1',
      registrationId: body.executor_registration_id,
      epoch: 1,
      expiresAt: clock / 1000 + 24 * 3600,
    });
    const stored = await store.currentRegistration('dev-1');
    expect(stored?.registrationId).toBe(body.executor_registration_id);
    expect(JSON.parse(stored?.executorPublicKey ?? '')).toEqual(executorKey);
    expect(stored?.apiKeyId).toBe('exec');
  });

  it('a new registration replaces the previous one, with the next epoch in its URL', async () => {
    const first = (await register()).json();
    const second = (await register()).json();
    expect(second.executor_registration_id).not.toBe(first.executor_registration_id);
    expect((await store.currentRegistration('dev-1'))?.registrationId).toBe(second.executor_registration_id);
    expect(verifyRelayUrl(first.url, signingKey.publicKey, clock / 1000)?.epoch).toBe(1);
    expect(verifyRelayUrl(second.url, signingKey.publicKey, clock / 1000)?.epoch).toBe(2);
  });

  it('signed relay URLs do not verify when tampered with or expired', async () => {
    const { url } = (await register()).json();
    expect(verifyRelayUrl(url.replace('role=environment', 'role=harness'), signingKey.publicKey, clock / 1000)).toBe(
      null,
    );
    expect(verifyRelayUrl(url.replace('/dev-1?', '/dev-2?'), signingKey.publicKey, clock / 1000)).toBe(null);
    expect(verifyRelayUrl(url, signingKey.publicKey, clock / 1000 + 24 * 3600)).toBe(null);
    const other = generateKeyPairSync('ed25519').publicKey;
    expect(verifyRelayUrl(url, other, clock / 1000)).toBe(null);
  });

  it('routes one environment to one relay node, consistently for both roles', async () => {
    const seen = new Set<string>();
    for (let i = 0; i < 20; i++) {
      const env = `dev-${i}`;
      const reg = (await register(env)).json();
      const bundle = (await connect(env)).json();
      expect(new URL(reg.url).host).toBe(new URL(bundle.url).host);
      seen.add(new URL(reg.url).host);
    }
    expect([...seen].sort()).toEqual(['relay-a:8081', 'relay-b:8081']);
  });

  it.each([
    ['missing bearer', null, 401, 'unauthorized'],
    ['unknown bearer', 'nope', 401, 'unauthorized'],
    ['harness key', 'harness', 403, 'forbidden_role'],
    ['admin key', 'admin', 403, 'forbidden_role'],
  ])('refuses a %s', async (_what, key, status, code) => {
    if (key === 'nope') tokens.nope = 'treg_not-a-key';
    const res = await register('dev-1', key as string);
    expect(res.statusCode).toBe(status);
    expect(res.json()).toEqual({ error: { code, message: expect.any(String) } });
    expect(await store.currentRegistration('dev-1')).toBeUndefined();
  });

  it('refuses a malformed Authorization header and a revoked key', async () => {
    const res = await app.inject({
      method: 'POST',
      url: '/cloud/environment/dev-1/register',
      headers: { authorization: `Basic ${tokens.exec}` },
      payload: {},
    });
    expect(res.statusCode).toBe(401);
    await store.revokeApiKey('exec', clock);
    expect((await register()).statusCode).toBe(401);
  });

  it('refuses an environment outside the key pattern', async () => {
    const res = await register('prod-1');
    expect(res.statusCode).toBe(403);
    expect(res.json().error.code).toBe('forbidden_environment');
  });

  it.each(['a.b', 'x'.repeat(129), 'a%20b', 'a~b'])('refuses environment id %j', async (env) => {
    const res = await register(env, 'exec2');
    expect(res.statusCode).toBe(400);
    expect(res.json().error.code).toBe('invalid_environment_id');
  });

  it('accepts a 128-character id of every allowed character class', async () => {
    const env = `aZ09_-${'x'.repeat(122)}`;
    expect((await register(env, 'exec2')).statusCode).toBe(200);
  });

  it('refuses bad bodies with stable codes', async () => {
    const bad = async (payload: unknown, code: string, status = 400) => {
      const res = await post('/cloud/environment/dev-1/register', 'exec', payload);
      expect(res.statusCode).toBe(status);
      expect(res.json().error.code).toBe(code);
    };
    await bad({ security_profile: 'noise_hybrid_ik_v1' }, 'invalid_request');
    await bad({ security_profile: 'legacy', executor_public_key: executorKey }, 'unsupported_security_profile');
    await bad(
      { security_profile: 'noise_hybrid_ik_v1', executor_public_key: { ...executorKey, extra: 1 } },
      'invalid_request',
    );
    await bad(
      {
        security_profile: 'noise_hybrid_ik_v1',
        executor_public_key: { ...executorKey, x25519_public_key: 'AAAA' },
      },
      'invalid_public_key',
    );
    await bad(
      { security_profile: 'noise_hybrid_ik_v1', executor_public_key: { ...executorKey, suite: 'Noise_other' } },
      'invalid_public_key',
    );
  });

  it('refuses invalid JSON, non-JSON and oversized bodies', async () => {
    const raw = (payload: string, type: string) =>
      app.inject({
        method: 'POST',
        url: '/cloud/environment/dev-1/register',
        headers: { ...auth('exec'), 'content-type': type },
        payload,
      });
    let res = await raw('{nope', 'application/json');
    expect([res.statusCode, res.json().error.code]).toEqual([400, 'invalid_json']);
    res = await raw('hello', 'text/plain');
    expect([res.statusCode, res.json().error.code]).toEqual([415, 'unsupported_media_type']);
    res = await raw(JSON.stringify({ pad: 'x'.repeat(20_000) }), 'application/json');
    expect([res.statusCode, res.json().error.code]).toEqual([413, 'body_too_large']);
  });
});

describe('POST /cloud/environment/:id/connect', () => {
  it('returns the bundle for the current registration', async () => {
    const reg = (await register()).json();
    const res = await connect();
    expect(res.statusCode).toBe(200);
    const bundle = res.json();
    expect(Object.keys(bundle).sort()).toEqual([
      'environment_id',
      'executor_public_key',
      'executor_registration_id',
      'harness_key_authorization',
      'security_profile',
      'url',
    ]);
    expect(bundle).toMatchObject({
      environment_id: 'dev-1',
      security_profile: 'noise_hybrid_ik_v1',
      executor_registration_id: reg.executor_registration_id,
      executor_public_key: executorKey,
    });
    expect(bundle.harness_key_authorization.length).toBeGreaterThan(30);
    expect(verifyRelayUrl(bundle.url, signingKey.publicKey, clock / 1000)?.role).toBe('harness');
  });

  it('404 environment_not_registered when no executor is registered', async () => {
    const res = await connect();
    expect([res.statusCode, res.json().error.code]).toEqual([404, 'environment_not_registered']);
  });

  it('refuses executor keys, out-of-scope environments and bad harness keys', async () => {
    await register();
    expect((await connect('dev-1', 'exec')).statusCode).toBe(403);
    expect((await connect('dev-1', 'prod-harness')).json().error.code).toBe('forbidden_environment');
    const res = await connect('dev-1', 'harness', { ...harnessKey, mlkem768_public_key: 'AAAA' });
    expect([res.statusCode, res.json().error.code]).toEqual([400, 'invalid_public_key']);
    expect((await connect('dev-1', 'harness', 'not-an-object')).json().error.code).toBe('invalid_request');
  });
});

describe('POST /cloud/environment/:id/validate', () => {
  async function minted(env = 'dev-1') {
    const reg = (await register(env)).json();
    const bundle = (await connect(env)).json();
    return {
      executor_registration_id: reg.executor_registration_id as string,
      harness_public_key: harnessKey,
      harness_key_authorization: bundle.harness_key_authorization as string,
    };
  }

  it('accepts a fresh authorization once; a replay is refused', async () => {
    const body = await minted();
    const first = await validate('dev-1', body);
    expect([first.statusCode, first.json()]).toEqual([200, { valid: true }]);
    expect((await validate('dev-1', body)).json()).toEqual({ valid: false });
  });

  it('refuses an expired authorization (default TTL 60 s)', async () => {
    const body = await minted();
    clock += 60_000;
    expect((await validate('dev-1', body)).json()).toEqual({ valid: false });
  });

  it('accepts just before expiry', async () => {
    const body = await minted();
    clock += 59_999;
    expect((await validate('dev-1', body)).json()).toEqual({ valid: true });
  });

  it('refuses a different harness key, and the authorization survives the attempt', async () => {
    const body = await minted();
    expect((await validate('dev-1', { ...body, harness_public_key: otherHarnessKey })).json()).toEqual({
      valid: false,
    });
    expect((await validate('dev-1', { ...body, harness_public_key: { nope: 1 } })).json()).toEqual({ valid: false });
    expect((await validate('dev-1', body)).json()).toEqual({ valid: true });
  });

  it('compares harness keys canonically whether or not the key was seen before', async () => {
    const body = await minted();
    const key = harnessKey as unknown as Record<string, string>;
    const reordered = {
      mlkem768_public_key: key.mlkem768_public_key,
      suite: key.suite,
      x25519_public_key: key.x25519_public_key,
    };
    const flipped = `${(key.x25519_public_key as string)[0] === 'A' ? 'B' : 'A'}${(key.x25519_public_key as string).slice(1)}`;
    for (const bad of [
      { ...key, extra: 'x' },
      { ...key, suite: 1 },
      { ...key, x25519_public_key: flipped },
    ]) {
      expect((await validate('dev-1', { ...body, harness_public_key: bad })).json()).toEqual({ valid: false });
    }
    expect((await validate('dev-1', { ...body, harness_public_key: reordered })).json()).toEqual({ valid: true });
  });

  it('compares the key material, not the suite label: the executor reports the harness key under its own suite', async () => {
    const body = await minted();
    const key = harnessKey as unknown as Record<string, string>;
    // /connect was sent under Codex's AES-GCM suite; a ChaChaPoly executor validates the same key under its own.
    expect(key.suite).toBe(SUITE_HYBRID_AESGCM);
    const asChaCha = { ...key, suite: SUITE_HYBRID_CHACHAPOLY };
    const other = { ...(otherHarnessKey as unknown as Record<string, string>), suite: SUITE_HYBRID_CHACHAPOLY };
    expect((await validate('dev-1', { ...body, harness_public_key: other })).json()).toEqual({ valid: false });
    expect((await validate('dev-1', { ...body, harness_public_key: { ...key, suite: 'Noise_nope' } })).json()).toEqual({
      valid: false,
    });
    expect((await validate('dev-1', { ...body, harness_public_key: asChaCha })).json()).toEqual({ valid: true });
  });

  it('refuses an authorization minted for another environment', async () => {
    const body = await minted('dev-1');
    const other = await minted('dev-2');
    expect(
      (await validate('dev-2', { ...other, harness_key_authorization: body.harness_key_authorization })).json(),
    ).toEqual({ valid: false });
    expect((await validate('dev-2', body)).json()).toEqual({ valid: false });
  });

  it('refuses a wrong or superseded registration id', async () => {
    const body = await minted();
    expect((await validate('dev-1', { ...body, executor_registration_id: 'reg_other' })).json()).toEqual({
      valid: false,
    });
    await register();
    expect((await validate('dev-1', body)).json()).toEqual({ valid: false });
  });

  it('refuses an unknown authorization', async () => {
    const body = await minted();
    expect((await validate('dev-1', { ...body, harness_key_authorization: 'thka_guess' })).json()).toEqual({
      valid: false,
    });
  });

  it('only the executor key that owns the registration gets a true answer', async () => {
    const body = await minted();
    expect((await validate('dev-1', body, 'exec2')).json()).toEqual({ valid: false });
    expect((await validate('dev-1', body)).json()).toEqual({ valid: true });
  });

  it('harness and admin keys cannot call it; bad bodies are 400', async () => {
    const body = await minted();
    expect((await validate('dev-1', body, 'harness')).statusCode).toBe(403);
    expect((await validate('dev-1', body, 'admin')).statusCode).toBe(403);
    tokens.none = 'x';
    expect((await validate('dev-1', body, 'none')).statusCode).toBe(401);
    const res = await validate('dev-1', { executor_registration_id: body.executor_registration_id });
    expect([res.statusCode, res.json().error.code]).toEqual([400, 'invalid_request']);
    expect((await validate('dev-1', body)).json()).toEqual({ valid: true });
  });

  it('concurrent validations of one authorization: exactly one is valid', async () => {
    const body = await minted();
    const answers = await Promise.all(Array.from({ length: 10 }, () => validate('dev-1', body)));
    expect(answers.filter((r) => r.json().valid === true)).toHaveLength(1);
  });
});

describe('health, unknown routes and logs', () => {
  it('/livez and /readyz', async () => {
    expect((await app.inject('/livez')).json()).toEqual({ status: 'ok' });
    expect((await app.inject('/readyz')).json()).toEqual({ status: 'ok' });
    await store.close();
    const res = await app.inject('/readyz');
    expect([res.statusCode, res.json().error.code]).toEqual([503, 'store_unavailable']);
  });

  it('answers a path with a broken percent-escape in the registry error format (found by fuzzing)', async () => {
    for (const url of ['/%', '/cloud/environment/%/connect', '/v1/%zz']) {
      const res = await app.inject({ method: 'GET', url });
      expect([url, res.statusCode, res.json()]).toEqual([
        url,
        400,
        { error: { code: 'invalid_request', message: 'the request path is not valid' } },
      ]);
    }
  });

  it('unknown routes and methods are 404 not_found', async () => {
    const res = await app.inject('/cloud/environment/dev-1/register');
    expect([res.statusCode, res.json()]).toEqual([404, { error: { code: 'not_found', message: 'no such route' } }]);
    expect((await app.inject({ method: 'POST', url: '/nope' })).statusCode).toBe(404);
  });

  it('close() then drain(): an in-flight request completes on the store before drain() resolves', async () => {
    const slow = { ...store, engine: store.engine } as RegistryStore;
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    slow.ping = async () => {
      await gate;
      await store.ping();
    };
    const other = await buildRegistry({ relayUrls: ['ws://r:1'] }, { store: slow, signingKey });
    await other.listen({ host: '127.0.0.1', port: 0 });
    const { port } = other.server.address() as { port: number };
    const socket = tcpConnect(port, '127.0.0.1');
    let received = '';
    socket.on('data', (d) => {
      received += d.toString();
    });
    // Two pipelined requests on one kept-alive connection: the first waits on the store.
    socket.write('GET /readyz HTTP/1.1\r\nHost: x\r\n\r\nGET /livez HTTP/1.1\r\nHost: x\r\n\r\n');
    await new Promise((resolve) => setTimeout(resolve, 50));
    const closed = other.close(); // Fastify's close waits for open connections, so it cannot be awaited yet
    let drained: boolean | undefined;
    const draining = other.drain(5_000).then((ok) => {
      drained = ok;
    });
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(drained).toBeUndefined();
    expect(await other.drain(10)).toBe(false);
    release();
    await draining;
    expect(drained).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 50));
    socket.destroy();
    await closed;
    expect(received).toMatch(/^HTTP\/1\.1 200 [\s\S]*\{"status":"ok"\}$/);
  });

  it('deletes expired authorizations periodically, and stops when closed', async () => {
    const pruned: number[] = [];
    const spy = { ...store, engine: store.engine } as RegistryStore;
    spy.pruneAuthorizations = async (before) => {
      pruned.push(before);
      return store.pruneAuthorizations(before);
    };
    const other = await buildRegistry(
      { relayUrls: ['ws://r:1'], pruneIntervalMs: 10 },
      { store: spy, signingKey, now: () => clock },
    );
    await other.ready();
    await new Promise((resolve) => setTimeout(resolve, 60));
    await other.close();
    const count = pruned.length;
    expect(count).toBeGreaterThan(1);
    expect(pruned.every((before) => before === clock)).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 40));
    expect(pruned.length).toBe(count);
  });

  it('refuses a registry with no relay URL', async () => {
    await expect(buildRegistry({ relayUrls: [] }, { store, signingKey })).rejects.toThrow(/relay URL/);
  });

  it('no token, authorization or signed URL ever appears in the logs', async () => {
    const reg = (await register()).json();
    const bundle = (await connect()).json();
    await validate('dev-1', {
      executor_registration_id: reg.executor_registration_id,
      harness_public_key: harnessKey,
      harness_key_authorization: bundle.harness_key_authorization,
    });
    await register('dev-1', 'harness');
    await validate('dev-1', { executor_registration_id: 'x', harness_public_key: 1, harness_key_authorization: 'y' });
    expect(logs.text()).toContain('executor registered');
    expect(logs.text()).toContain('harness key validation');
    const secrets = [
      ...Object.values(tokens),
      bundle.harness_key_authorization,
      new URL(reg.url).searchParams.get('sig'),
      new URL(bundle.url).searchParams.get('sig'),
    ];
    for (const secret of secrets) expect(logs.text()).not.toContain(secret);
  });
});
