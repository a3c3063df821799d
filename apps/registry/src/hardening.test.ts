/**
 * Issue 16 on the registry: revocation that bites (key and registration revocation, the heartbeat's revocation list
 * and the signed push to relays), the relay role, environment ownership, registration epochs and URL lifetimes.
 */
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateIdentity, publicKeyToJson } from '@tether/noise';
import { type SigningKey, verifyRelayUrl, verifyRevocations } from '@tether/relay-auth';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createKey, logCapture } from './__tests__/app-fixture.js';
import { buildRegistry, type RegistryConfig } from './app.js';
import { REVOCATION_LIST_CAP, revocationsEndpoint } from './revocations.js';
import { pickRelayNode } from './routing.js';
import { openSqliteStore, type RegistryStore, type Role } from './store/index.js';

const executorKey = publicKeyToJson(generateIdentity().publicKey);
const harnessKey = publicKeyToJson(generateIdentity().publicKey);
const pair = generateKeyPairSync('ed25519');
const signingKey: SigningKey = { privateKey: pair.privateKey, publicKey: pair.publicKey };

let store: RegistryStore;
let app: FastifyInstance;
let clock: number;
let logs: ReturnType<typeof logCapture>;
const tokens: Record<string, string> = {};
const cleanups: Array<() => Promise<void> | void> = [];

async function addKey(id: string, role: Role, environments: string, relayUrl: string | null = null) {
  tokens[id] = await createKey(store, { id, role, environments, label: id, createdAt: 0, relayUrl });
}

async function start(config: Partial<RegistryConfig> = {}, storePath = ':memory:') {
  store = openSqliteStore(storePath);
  clock = 1_700_000_000_000;
  logs = logCapture();
  app = await buildRegistry(
    { relayUrls: ['ws://relay-a:1', 'ws://relay-b:1'], ...config },
    { store, signingKey, now: () => clock, logger: pino({ level: 'info' }, logs.stream) },
  );
  await addKey('exec', 'executor', 'dev-*');
  await addKey('exec2', 'executor', '*');
  await addKey('harness', 'harness', 'dev-*');
  await addKey('admin', 'admin', '*');
}

afterEach(async () => {
  await app?.close();
  await store?.close();
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const call = (method: 'GET' | 'POST' | 'DELETE', url: string, key: string | null, payload?: unknown) =>
  app.inject({
    method,
    url,
    headers: key === null ? {} : { authorization: `Bearer ${tokens[key]}` },
    ...(payload === undefined ? {} : { payload: payload as object }),
  });
const register = (env = 'dev-1', key = 'exec') =>
  call('POST', `/cloud/environment/${env}/register`, key, {
    security_profile: 'noise_hybrid_ik_v1',
    executor_public_key: executorKey,
  });
const connect = (env = 'dev-1', key = 'harness') =>
  call('POST', `/cloud/environment/${env}/connect`, key, { harness_public_key: harnessKey });
const validate = (env: string, bundle: Record<string, string>, key = 'exec') =>
  call('POST', `/cloud/environment/${env}/validate`, key, {
    executor_registration_id: bundle.executor_registration_id,
    harness_public_key: harnessKey,
    harness_key_authorization: bundle.harness_key_authorization,
  });
const heartbeat = (url: string, key = 'admin') => call('POST', '/v1/relay/heartbeat', key, { url });

/**
 * A stand-in relay node's HTTP side: records every request it gets, answering each with the next of `statuses`
 * (200 once they are used up). `all` keeps every request, `next()` hands them out one by one.
 */
async function fakeRelay(statuses: number[] = []): Promise<{
  url: string;
  requests: Array<{ req: IncomingMessage; body: string }>;
  all: Array<{ req: IncomingMessage; body: string }>;
  next(): Promise<{ req: IncomingMessage; body: string }>;
}> {
  const requests: Array<{ req: IncomingMessage; body: string }> = [];
  const all: Array<{ req: IncomingMessage; body: string }> = [];
  const waiting: Array<(r: { req: IncomingMessage; body: string }) => void> = [];
  const server: Server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => {
      body += chunk;
    });
    req.on('end', () => {
      res.writeHead(statuses.shift() ?? 200, { 'content-type': 'application/json' }).end('{"status":"ok"}');
      const entry = { req, body };
      all.push(entry);
      const wake = waiting.shift();
      if (wake) wake(entry);
      else requests.push(entry);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const { port } = server.address() as AddressInfo;
  return {
    url: `ws://127.0.0.1:${port}/edge`,
    requests,
    all,
    next: () => {
      const queued = requests.shift();
      return queued ? Promise.resolve(queued) : new Promise((resolve) => waiting.push(resolve));
    },
  };
}

/** A port nothing listens on (bound, then released). */
async function deadPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('revocation that bites', () => {
  beforeEach(() => start());

  it('revoking an executor key revokes its registrations at once: /connect 410 registration_revoked, /validate refused', async () => {
    await register('dev-1');
    await register('dev-2');
    const bundle = (await connect('dev-1')).json();
    const res = await call('DELETE', '/v1/keys/exec', 'admin');
    expect(res.statusCode).toBe(200);
    expect(res.json().status).toBe('revoked');
    expect(
      res
        .json()
        .revoked_registrations.map((r: { environment_id: string }) => r.environment_id)
        .sort(),
    ).toEqual(['dev-1', 'dev-2']);
    const refused = await connect('dev-1');
    expect(refused.statusCode).toBe(410);
    expect(refused.json().error.code).toBe('registration_revoked');
    expect(refused.json().error.message).toMatch(/registration was revoked.*register again with a valid API key/);
    // The revoked key cannot validate (401) nor register again.
    expect((await validate('dev-1', bundle)).statusCode).toBe(401);
    expect((await register('dev-1')).statusCode).toBe(401);
    // Distinct from an environment that never had an executor.
    expect((await connect('dev-3')).json().error.code).toBe('environment_not_registered');
    expect((await call('DELETE', '/v1/keys/exec', 'admin')).json().error.code).toBe('key_not_found');
    expect((await call('DELETE', '/v1/keys/harness', 'exec2')).statusCode).toBe(403);
  });

  it('a revoked registration no longer validates even with its executor key still valid; re-registering restores /connect', async () => {
    const reg = (await register()).json();
    const bundle = (await connect()).json();
    const path = `/v1/environments/dev-1/registrations/${reg.executor_registration_id}`;
    expect((await call('DELETE', path, 'admin')).statusCode).toBe(200);
    expect((await validate('dev-1', bundle)).json()).toEqual({ valid: false });
    expect((await connect()).json().error.code).toBe('registration_revoked');
    const again = (await register()).json();
    const fresh = await connect();
    expect(fresh.statusCode).toBe(200);
    expect(fresh.json().executor_registration_id).toBe(again.executor_registration_id);
    expect((await validate('dev-1', fresh.json())).json()).toEqual({ valid: true });
  });

  it('the heartbeat answer lists registrations revoked within the relay URL lifetime, newest first', async () => {
    const first = (await register('dev-1')).json();
    await call('DELETE', `/v1/environments/dev-1/registrations/${first.executor_registration_id}`, 'admin');
    clock += 1_000;
    const second = (await register('dev-2')).json();
    await call('DELETE', '/v1/keys/exec', 'admin');
    const res = await heartbeat('ws://relay-a:1');
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({
      status: 'ok',
      revoked_registrations: [
        { environment_id: 'dev-2', registration_id: second.executor_registration_id },
        { environment_id: 'dev-1', registration_id: first.executor_registration_id },
      ],
    });
    clock += 24 * 3600_000 - 500; // dev-1's revocation is now older than an environment URL lives
    expect((await heartbeat('ws://relay-a:1')).json().revoked_registrations).toEqual([
      { environment_id: 'dev-2', registration_id: second.executor_registration_id },
    ]);
  });

  it(`the heartbeat answer holds at most ${REVOCATION_LIST_CAP} revocations, the newest`, async () => {
    const total = REVOCATION_LIST_CAP + 5;
    for (let i = 0; i < total; i += 500) {
      await Promise.all(
        Array.from({ length: Math.min(500, total - i) }, async (_, j) => {
          const n = i + j;
          await store.putRegistration({
            environmentId: `bulk-${n}`,
            registrationId: `reg-${n}`,
            securityProfile: 'noise_hybrid_ik_v1',
            executorPublicKey: '{}',
            apiKeyId: 'exec',
            createdAt: clock,
          });
          await store.revokeRegistration(`bulk-${n}`, `reg-${n}`, clock - total + n);
        }),
      );
    }
    const listed = (await heartbeat('ws://relay-a:1')).json().revoked_registrations;
    expect(listed).toHaveLength(REVOCATION_LIST_CAP);
    expect(listed[0]).toEqual({ environment_id: `bulk-${total - 1}`, registration_id: `reg-${total - 1}` });
    expect(listed.at(-1)).toEqual({ environment_id: 'bulk-5', registration_id: 'reg-5' });
  });
});

describe('revocation push to relay nodes', () => {
  it('maps node URLs to their revocation endpoint', () => {
    expect(revocationsEndpoint('ws://127.0.0.1:8081')).toBe('http://127.0.0.1:8081/v1/revocations');
    expect(revocationsEndpoint('wss://relay.example:443/edge/')).toBe('https://relay.example/edge/v1/revocations');
    expect(revocationsEndpoint('ws://r:1/a/b?x=1')).toBe('http://r:1/a/b/v1/revocations');
  });

  it('POSTs each revocation, signed over the exact body, to every node; a dead node never fails the revoke', async () => {
    const relay = await fakeRelay();
    const dead = `ws://127.0.0.1:${await deadPort()}`;
    // No poll during the test: the push must come from the revocation itself.
    await start({ relayUrls: [relay.url, dead], revocationPollMs: 3_600_000 });
    const reg = (await register()).json();
    const res = await call('DELETE', `/v1/environments/dev-1/registrations/${reg.executor_registration_id}`, 'admin');
    expect(res.statusCode).toBe(200);
    const pushed = await relay.next();
    expect(pushed.req.method).toBe('POST');
    expect(pushed.req.url).toBe('/edge/v1/revocations');
    expect(pushed.req.headers['content-type']).toBe('application/json');
    const signature = pushed.req.headers['x-tether-signature'] as string;
    expect(verifyRevocations(pushed.body, signature, signingKey.publicKey)).toBe(true);
    expect(JSON.parse(pushed.body)).toEqual({
      revoked_registrations: [{ environment_id: 'dev-1', registration_id: reg.executor_registration_id }],
      issued_at: Math.floor(clock / 1000),
    });
    await app.close(); // waits for the push to the dead node to fail
    expect(logs.text()).toContain('pushing revocations to a relay failed');
    expect(logs.text()).not.toContain(signature);
  });

  it("pushes a key revocation's registrations, and revocations made by another process (the CLI) within a poll", async () => {
    const relay = await fakeRelay();
    const dir = mkdtempSync(join(tmpdir(), 'registry-push-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    await start({ relayUrls: [relay.url], revocationPollMs: 20 }, join(dir, 'r.db'));
    await app.ready();
    const one = (await register('dev-1')).json();
    await call('DELETE', '/v1/keys/exec', 'admin');
    expect(JSON.parse((await relay.next()).body).revoked_registrations).toEqual([
      { environment_id: 'dev-1', registration_id: one.executor_registration_id },
    ]);
    // As `registry keys revoke` would, from its own connection.
    const two = (await register('dev-2', 'exec2')).json();
    const cli = openSqliteStore(join(dir, 'r.db'));
    try {
      await cli.revokeApiKey('exec2', clock);
    } finally {
      await cli.close();
    }
    const pushed = await relay.next();
    expect(
      verifyRevocations(pushed.body, pushed.req.headers['x-tether-signature'] as string, signingKey.publicKey),
    ).toBe(true);
    expect(JSON.parse(pushed.body).revoked_registrations).toEqual([
      { environment_id: 'dev-2', registration_id: two.executor_registration_id },
    ]);
  });
});

describe('revocation delivery that does not depend on clocks or on one try', () => {
  /** The registry's store file, and revocations recorded through another connection to it, as the CLI does. */
  async function fileStore() {
    const dir = mkdtempSync(join(tmpdir(), 'registry-delivery-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const path = join(dir, 'r.db');
    const revokeElsewhere = async (keyId: string, at: number) => {
      const cli = openSqliteStore(path);
      try {
        return await cli.revokeApiKey(keyId, at);
      } finally {
        await cli.close();
      }
    };
    return { path, revokeElsewhere };
  }

  /** Resolves after `count` more polls have read the store (and so started their pushes). */
  function polls() {
    let seen = 0;
    const list = store.listRevokedRegistrations.bind(store);
    store.listRevokedRegistrations = async (since, limit) => {
      const records = await list(since, limit);
      seen++;
      return records;
    };
    return async (count: number) => {
      const target = seen + count;
      await expect.poll(() => seen).toBeGreaterThanOrEqual(target);
    };
  }

  const entries = (body: string) => JSON.parse(body).revoked_registrations;

  it('pushes revocations recorded before the server started and ones stamped by a clock behind its own', async () => {
    const relay = await fakeRelay();
    const { path, revokeElsewhere } = await fileStore();
    await start({ relayUrls: [relay.url], revocationPollMs: 20 }, path);
    // Registered and revoked before the app is ready (its poll starts onReady): while the server was down or starting.
    await store.putRegistration({
      environmentId: 'dev-1',
      registrationId: 'reg-early',
      securityProfile: 'noise_hybrid_ik_v1',
      executorPublicKey: '{}',
      apiKeyId: 'exec',
      createdAt: clock - 10_000,
    });
    await revokeElsewhere('exec', clock - 5_000);
    await app.ready();
    expect(entries((await relay.next()).body)).toEqual([{ environment_id: 'dev-1', registration_id: 'reg-early' }]);
    // The CLI's clock an hour behind the server's.
    const two = (await register('dev-2', 'exec2')).json();
    await revokeElsewhere('exec2', clock - 3_600_000);
    expect(entries((await relay.next()).body)).toEqual([
      { environment_id: 'dev-2', registration_id: two.executor_registration_id },
    ]);
  });

  it('counts a revocation delivered to a node only once that node answered 2xx, and retries the others each poll', async () => {
    const healthy = await fakeRelay();
    const flaky = await fakeRelay([503, 500]);
    const { path } = await fileStore();
    await start({ relayUrls: [healthy.url, flaky.url], revocationPollMs: 20 }, path);
    const waitPolls = polls();
    await app.ready();
    const reg = (await register()).json();
    await call('DELETE', `/v1/environments/dev-1/registrations/${reg.executor_registration_id}`, 'admin');
    const expected = [{ environment_id: 'dev-1', registration_id: reg.executor_registration_id }];
    // The flaky node refuses twice; later polls send it again until it answers 200.
    for (let i = 0; i < 3; i++) expect(entries((await flaky.next()).body)).toEqual(expected);
    // Then nobody is sent it again, however many polls follow.
    await waitPolls(3);
    await app.revocations.settled();
    expect(healthy.all.map((r) => entries(r.body))).toEqual([expected]);
    expect(flaky.all).toHaveLength(3);
    expect(logs.text().match(/relay refused pushed revocations/g)).toHaveLength(1); // one warning per run of failures
    expect(logs.text()).toContain('pushing revocations to a relay works again');
  });
});

describe('relay role', () => {
  beforeEach(async () => {
    await start();
    await addKey('relay', 'relay', '', 'ws://relay-b:1');
  });

  it('a relay key heartbeats for its own node URL only', async () => {
    expect((await heartbeat('ws://relay-b:1', 'relay')).json()).toEqual({ status: 'ok', revoked_registrations: [] });
    const other = await heartbeat('ws://relay-a:1', 'relay');
    expect([other.statusCode, other.json().error.code]).toEqual([403, 'forbidden_relay_node']);
    const unknown = await heartbeat('ws://elsewhere:1', 'relay');
    expect([unknown.statusCode, unknown.json().error.code]).toEqual([400, 'unknown_relay_node']);
    // Admin keys still may (backwards compatible), for any configured node.
    expect((await heartbeat('ws://relay-a:1', 'admin')).statusCode).toBe(200);
  });

  /** The first `dev-N` the registry routes to `node` when both nodes are live. */
  const routedTo = (node: string) => {
    for (let n = 0; ; n++)
      if (pickRelayNode(['ws://relay-a:1', 'ws://relay-b:1'], `dev-${n}`) === node) return `dev-${n}`;
  };
  const report = (url: string, environments: string[], key = 'relay') =>
    call('POST', '/v1/relay/heartbeat', key, { url, environments });
  const links = async () =>
    Object.fromEntries(
      (await call('GET', '/v1/environments', 'admin'))
        .json()
        .environments.map((e: { environment_id: string; relay_link: string }) => [e.environment_id, e.relay_link]),
    );

  it('a node’s heartbeat counts only for environments routed to it: a relay key cannot take others offline', async () => {
    const onA = routedTo('ws://relay-a:1');
    const onB = routedTo('ws://relay-b:1');
    await register(onA);
    await register(onB);
    expect((await report('ws://relay-a:1', [onA], 'admin')).statusCode).toBe(200);
    expect((await report('ws://relay-b:1', [onB])).statusCode).toBe(200);
    expect(await links()).toEqual({ [onA]: 'up', [onB]: 'up' });
    // relay-b's key claims relay-a's environment, then reports it gone: neither report counts for it.
    clock += 1_000;
    expect((await report('ws://relay-b:1', [onA, onB])).statusCode).toBe(200);
    clock += 1_000;
    await report('ws://relay-b:1', [onB]);
    expect(await links()).toEqual({ [onA]: 'up', [onB]: 'up' });
    expect((await connect(onA)).statusCode).toBe(200);
    // The same for an admin key heartbeating as relay-b.
    await report('ws://relay-b:1', [onA, onB], 'admin');
    await report('ws://relay-b:1', [onB], 'admin');
    expect(await links()).toEqual({ [onA]: 'up', [onB]: 'up' });
  });

  it('a dead node’s environments read offline until their executor registers again, then follow it', async () => {
    const onA = routedTo('ws://relay-a:1');
    await register(onA);
    await report('ws://relay-a:1', [onA], 'admin');
    await report('ws://relay-b:1', []);
    expect((await connect(onA)).json().url).toMatch(/^ws:\/\/relay-a:1\//);
    clock += 31_000; // relay-a's presence has lapsed; its executor's socket went with it
    await report('ws://relay-b:1', [onA]); // a stale socket there does not make relay-b the executor's node
    expect((await call('GET', '/v1/environments', 'admin')).json().environments[0]).toMatchObject({
      environment_id: onA,
      relay_node: 'ws://relay-a:1',
      relay_link: 'down',
    });
    const offline = await connect(onA);
    expect([offline.statusCode, offline.json().error.code]).toEqual([409, 'environment_offline']);
    // The executor fails over: a new registration sends it to the live node, and relay-b's report now counts.
    const again = await call('POST', `/cloud/environment/${onA}/register`, 'exec', {
      security_profile: 'noise_hybrid_ik_v1',
      executor_public_key: executorKey,
      unreachable_relay_url: 'ws://relay-a:1',
    });
    expect(again.json().url).toMatch(/^ws:\/\/relay-b:1\//);
    await report('ws://relay-b:1', [onA]);
    expect(await links()).toEqual({ [onA]: 'up' });
    expect((await connect(onA)).json().url).toMatch(/^ws:\/\/relay-b:1\//);
  });

  it('an executor failing over is sent to another live node even while its old node still reads live', async () => {
    const onA = routedTo('ws://relay-a:1');
    await report('ws://relay-a:1', [], 'admin');
    await report('ws://relay-b:1', []);
    expect((await register(onA)).json().url).toMatch(/^ws:\/\/relay-a:1\//);
    const moved = await call('POST', `/cloud/environment/${onA}/register`, 'exec', {
      security_profile: 'noise_hybrid_ik_v1',
      executor_public_key: executorKey,
      unreachable_relay_url: 'ws://relay-a:1',
    });
    expect(moved.json().url).toMatch(/^ws:\/\/relay-b:1\//);
    // With no other live node the hint cannot be honoured: the executor is sent where there is one.
    clock += 31_000;
    await report('ws://relay-a:1', [], 'admin');
    const only = await call('POST', `/cloud/environment/${onA}/register`, 'exec', {
      security_profile: 'noise_hybrid_ik_v1',
      executor_public_key: executorKey,
      unreachable_relay_url: 'ws://relay-a:1',
    });
    expect(only.json().url).toMatch(/^ws:\/\/relay-a:1\//);
  });

  it('a node that joins changes no registered environment’s node: harnesses go where their executor is', async () => {
    await store.heartbeatRelayNode('ws://relay-a:1', clock, []); // only relay-a is live
    const envs = Array.from({ length: 12 }, (_, i) => `dev-join-${i}`);
    for (const env of envs) expect((await register(env)).json().url).toMatch(/^ws:\/\/relay-a:1\//);
    await report('ws://relay-a:1', envs, 'admin');
    await report('ws://relay-b:1', []); // relay-b joins
    const moved = envs.filter((env) => pickRelayNode(['ws://relay-a:1', 'ws://relay-b:1'], env) === 'ws://relay-b:1');
    expect(moved.length, 'some environments hash to the new node').toBeGreaterThan(0);
    for (const env of envs) {
      const res = await connect(env);
      expect(res.json().url, res.body).toMatch(/^ws:\/\/relay-a:1\//);
    }
    // A registration made from now on may land on the new node.
    expect((await register(moved[0])).json().url).toMatch(/^ws:\/\/relay-b:1\//);
  });

  it('a relay key gets 403 on every other authenticated route', async () => {
    const reg = (await register()).json();
    const routes: Array<[method: 'GET' | 'POST' | 'DELETE', url: string, payload?: unknown]> = [
      [
        'POST',
        '/cloud/environment/dev-1/register',
        { security_profile: 'noise_hybrid_ik_v1', executor_public_key: executorKey },
      ],
      ['POST', '/cloud/environment/dev-1/connect', { harness_public_key: harnessKey }],
      [
        'POST',
        '/cloud/environment/dev-1/validate',
        { executor_registration_id: 'r', harness_public_key: harnessKey, harness_key_authorization: 'a' },
      ],
      ['GET', '/v1/environments'],
      ['DELETE', `/v1/environments/dev-1/registrations/${reg.executor_registration_id}`],
      ['DELETE', '/v1/keys/exec'],
      ['POST', '/v1/environments/dev-1/owner', { api_key_id: 'exec2' }],
      ['GET', '/v1/relay/nodes'],
    ];
    for (const [method, url, payload] of routes) {
      const res = await call(method, url, 'relay', payload);
      expect([url, res.statusCode, res.json().error.code]).toEqual([url, 403, 'forbidden_role']);
    }
    expect((await call('GET', '/v1/environments', 'relay')).json().error.message).toBe('this route needs an admin key');
    expect((await store.currentRegistration('dev-1'))?.registrationId).toBe(reg.executor_registration_id);
  });
});

describe('environment ownership', () => {
  beforeEach(() => start());

  it('an environment is bound to the executor key that first registered it; others get 403 environment_owned', async () => {
    const first = (await register('dev-1', 'exec')).json();
    const stolen = await register('dev-1', 'exec2');
    expect(stolen.statusCode).toBe(403);
    expect(stolen.json().error.code).toBe('environment_owned');
    expect(stolen.json().error.message).toMatch(/bound to another executor API key.*transfer/);
    expect((await store.currentRegistration('dev-1'))?.registrationId).toBe(first.executor_registration_id);
    const listed = (await call('GET', '/v1/environments', 'admin')).json().environments[0];
    expect(listed).toMatchObject({ environment_id: 'dev-1', owner_key_id: 'exec', epoch: 1 });
  });

  it('an admin transfers an environment to another executor key; the old key is then refused', async () => {
    await register('dev-1', 'exec');
    const transfer = (api_key_id: string, key = 'admin') =>
      call('POST', '/v1/environments/dev-1/owner', key, { api_key_id });
    expect((await transfer('exec2', 'exec')).statusCode).toBe(403);
    expect((await transfer('harness')).json().error.code).toBe('invalid_owner_key');
    expect((await transfer('nope')).json().error.code).toBe('invalid_owner_key');
    expect((await transfer('exec2')).json()).toEqual({ status: 'transferred' });
    const moved = await register('dev-1', 'exec2');
    expect(moved.statusCode).toBe(200);
    expect(verifyRelayUrl(moved.json().url, signingKey.publicKey, clock / 1000)?.epoch).toBe(2);
    expect((await register('dev-1', 'exec')).json().error.code).toBe('environment_owned');
  });
});

describe('registration epochs and URL lifetimes', () => {
  it("both roles' URLs carry the current registration's epoch", async () => {
    await start();
    await register();
    const second = (await register()).json();
    const bundle = (await connect()).json();
    expect(verifyRelayUrl(second.url, signingKey.publicKey, clock / 1000)).toMatchObject({
      role: 'environment',
      epoch: 2,
    });
    expect(verifyRelayUrl(bundle.url, signingKey.publicKey, clock / 1000)).toMatchObject({
      role: 'harness',
      registrationId: second.executor_registration_id,
      epoch: 2,
    });
  });

  it('a harness URL lives as long as its authorization; the environment URL lives relayUrlTtlMs', async () => {
    await start({ authorizationTtlMs: 30_000 });
    const reg = (await register()).json();
    const bundle = (await connect()).json();
    const harness = verifyRelayUrl(bundle.url, signingKey.publicKey, clock / 1000);
    expect(harness?.expiresAt).toBe(Math.ceil((clock + 30_000) / 1000));
    expect(verifyRelayUrl(bundle.url, signingKey.publicKey, clock / 1000 + 31)).toBeNull();
    expect(verifyRelayUrl(reg.url, signingKey.publicKey, clock / 1000)?.expiresAt).toBe(clock / 1000 + 24 * 3600);
  });

  it('each harness bundle is a grant of its own (a signed nonce), even within one second; environment URLs carry none', async () => {
    await start();
    const reg = (await register()).json();
    // The clock stands still: every bundle below is issued in the same second, with the same expiry.
    const urls = await Promise.all(Array.from({ length: 8 }, async () => (await connect()).json().url as string));
    expect(new Set(urls).size).toBe(8);
    const grants = urls.map((url) => verifyRelayUrl(url, signingKey.publicKey, clock / 1000));
    expect(new Set(grants.map((g) => g?.nonce)).size).toBe(8);
    for (const grant of grants) expect(grant?.nonce).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(new Set(grants.map((g) => g?.expiresAt)).size).toBe(1);
    expect(verifyRelayUrl(reg.url, signingKey.publicKey, clock / 1000)).not.toHaveProperty('nonce');
    expect(reg.url).not.toContain('nonce=');
  });
});
