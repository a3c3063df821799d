/**
 * Browser grants and sessions (issue 21), on the real app over SQLite and PostgreSQL: minting, one-time exchange,
 * the session's scope (one environment's /connect), expiry, key revocation, pruning, and that logs hold neither.
 */
import { generateIdentity, publicKeyToJson } from '@tether/noise';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type AppFixture, logCapture, newSigningKey, openApp } from './__tests__/app-fixture.js';
import { ENGINES } from './__tests__/engines.js';
import { buildRegistry } from './app.js';
import { REGISTRY_REDACT } from './cli.js';
import type { RegistryStore } from './store/index.js';

const harnessKey = publicKeyToJson(generateIdentity().publicKey);

describe.each(ENGINES)('browser grants ($name)', (engine) => {
  let registry: AppFixture;
  let store: RegistryStore;
  let app: FastifyInstance;
  let tokens: AppFixture['tokens'];
  let clock: number;
  let logs: ReturnType<typeof logCapture>;

  const post = (url: string, bearer: string | null, payload: object) => registry.call('POST', url, bearer, payload);
  const mint = (environmentId: string, key = 'harness', extra: object = {}) =>
    post('/cloud/browser-grants', tokens[key] as string, { environment_id: environmentId, ...extra });
  const exchange = (grant: string) => post('/cloud/browser-grants/exchange', null, { grant });
  const connect = (environmentId: string, bearer: string) =>
    post(`/cloud/environment/${environmentId}/connect`, bearer, { harness_public_key: harnessKey });
  const session = async (environmentId = 'dev-1') => {
    const grant = (await mint(environmentId)).json().grant as string;
    return (await exchange(grant)).json().token as string;
  };

  beforeEach(async () => {
    clock = 1_700_000_000_000;
    logs = logCapture();
    registry = await openApp(
      engine,
      ['dev-1', 'dev-2'],
      { browserSessionTtlMs: 600_000 },
      {
        now: () => clock,
        logger: pino({ level: 'trace', redact: { paths: [...REGISTRY_REDACT], censor: '[redacted]' } }, logs.stream),
      },
    );
    ({ app, store, tokens } = registry);
  });

  afterEach(() => registry.close());

  it('mints a grant for an environment the key covers, with a /ui link', async () => {
    const response = await mint('dev-1');
    expect(response.statusCode).toBe(201);
    const body = response.json();
    expect(Object.keys(body).sort()).toEqual(['environment_id', 'expires_at', 'grant', 'url']);
    expect(body.grant).toMatch(/^tbgr_[A-Za-z0-9_-]{43}$/);
    expect(body.environment_id).toBe('dev-1');
    expect(body.expires_at).toBe(clock / 1000 + 300);
    expect(body.url).toBe(`http://localhost:80/ui/#env=dev-1&grant=${body.grant}`);
    expect((await mint('dev-1', 'harness', { ttl_seconds: 900 })).json().expires_at).toBe(clock / 1000 + 900);
    expect((await mint('dev-1', 'harness', { ttl_seconds: 901 })).statusCode).toBe(400);
    expect((await mint('dev-1', 'harness', { ttl_seconds: 0 })).statusCode).toBe(400);
    expect((await mint('prod-1')).statusCode).toBe(403);
    expect((await mint('dev-1', 'exec')).statusCode).toBe(403);
    expect((await post('/cloud/browser-grants', null, { environment_id: 'dev-1' })).statusCode).toBe(401);
    // The URL's base follows the request (forwarded headers count only with --trust-proxy).
    const forwarded = await app.inject({
      method: 'POST',
      url: '/cloud/browser-grants',
      headers: { authorization: `Bearer ${tokens.harness}`, host: 'reg.example:8443', 'x-forwarded-proto': 'https' },
      payload: { environment_id: 'dev-1' },
    });
    expect(forwarded.json().url).toMatch(/^http:\/\/reg\.example:8443\/ui\/#env=dev-1&grant=tbgr_/);
  });

  it('with --trust-proxy, takes X-Forwarded-Proto/Host for the link only from a trusted peer', async () => {
    // Fastify before 5.8.3 (CVE-2026-3635) read these two headers from any peer once trustProxy was set.
    const proxied = await buildRegistry(
      { relayUrls: ['ws://127.0.0.1:1'], trustProxy: ['10.0.0.0/8'] },
      { store, signingKey: newSigningKey(), now: () => clock },
    );
    const linkFrom = async (remoteAddress: string) =>
      (
        await proxied.inject({
          method: 'POST',
          url: '/cloud/browser-grants',
          remoteAddress,
          headers: {
            authorization: `Bearer ${tokens.harness}`,
            host: 'direct.example:8080',
            'x-forwarded-proto': 'https',
            'x-forwarded-host': 'reg.example',
          },
          payload: { environment_id: 'dev-1' },
        })
      ).json().url as string;
    try {
      expect(await linkFrom('10.1.2.3')).toMatch(/^https:\/\/reg\.example\/ui\/#env=dev-1&grant=tbgr_/);
      expect(await linkFrom('192.0.2.1')).toMatch(/^http:\/\/direct\.example:8080\/ui\/#env=dev-1&grant=tbgr_/);
    } finally {
      await proxied.close();
    }
  });

  it('exchanges a grant once for a session that may /connect to that one environment only', async () => {
    const grant = (await mint('dev-1')).json().grant as string;
    const first = await exchange(grant);
    expect(first.statusCode).toBe(200);
    const { token, environment_id, expires_at } = first.json();
    expect(token).toMatch(/^tbws_/);
    expect(environment_id).toBe('dev-1');
    expect(expires_at).toBe(clock / 1000 + 600);
    const again = await exchange(grant);
    expect(again.statusCode).toBe(401);
    expect(again.json().error.code).toBe('invalid_grant');
    expect((await exchange('tbgr_unknown')).statusCode).toBe(401);

    expect((await connect('dev-1', token)).statusCode).toBe(200);
    const elsewhere = await connect('dev-2', token);
    expect(elsewhere.statusCode).toBe(403);
    expect(elsewhere.json().error.code).toBe('forbidden_environment');
    // Anywhere else it is no key at all.
    expect((await post('/cloud/browser-grants', token, { environment_id: 'dev-1' })).statusCode).toBe(401);
    expect((await post('/cloud/environment/dev-1/validate', token, {})).statusCode).toBe(401);
    expect(
      (await app.inject({ url: '/v1/environments', headers: { authorization: `Bearer ${token}` } })).statusCode,
    ).toBe(401);
  });

  it('lets one of many concurrent exchanges win', async () => {
    const grant = (await mint('dev-1')).json().grant as string;
    const answers = await Promise.all(Array.from({ length: 8 }, () => exchange(grant)));
    expect(answers.filter((a) => a.statusCode === 200)).toHaveLength(1);
    expect(answers.filter((a) => a.statusCode === 401)).toHaveLength(7);
  });

  it('refuses an expired grant and an expired session; the sweep deletes both', async () => {
    const stale = (await mint('dev-1', 'harness', { ttl_seconds: 10 })).json().grant as string;
    const token = await session();
    clock += 10_000;
    expect((await exchange(stale)).statusCode).toBe(401);
    expect((await connect('dev-1', token)).statusCode).toBe(200);
    clock += 600_000;
    expect((await connect('dev-1', token)).statusCode).toBe(401);
    expect(await store.pruneBrowserGrants(clock)).toBe(2); // the stale grant and the session
    expect(await store.pruneBrowserGrants(clock)).toBe(0);
  });

  it("revoking the minting key voids its grants and sessions, not other keys'", async () => {
    const token = await session();
    const pending = (await mint('dev-1')).json().grant as string;
    const otherGrant = (await mint('dev-1', 'other')).json().grant as string;
    const otherToken = (await exchange(otherGrant)).json().token as string;
    expect(await store.revokeApiKey('harness', clock)).not.toBeNull();
    expect((await connect('dev-1', token)).statusCode).toBe(401);
    expect((await exchange(pending)).statusCode).toBe(401);
    expect((await connect('dev-1', otherToken)).statusCode).toBe(200);
  });

  it('logs neither grants nor session tokens', async () => {
    const minted = await mint('dev-1');
    const grant = minted.json().grant as string;
    const token = (await exchange(grant)).json().token as string;
    await exchange(grant);
    await connect('dev-1', token);
    expect(logs.text()).toContain('browser grant exchanged');
    expect(logs.text()).toContain('browser grant refused');
    for (const secret of [grant, token, grant.slice(5), token.slice(5), tokens.harness as string]) {
      expect(logs.text()).not.toContain(secret);
    }
    // A careless `log.info({ grant })` would be redacted too.
    app.log.info({ grant, body: { grant } }, 'probe');
    expect(logs.text()).not.toContain(grant);
  });
});
