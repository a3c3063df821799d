import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openPostgresStore, openSqliteStore, openStore, type RegistryStore } from './index.js';
import { POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS } from './migrations.js';
import { sqlitePragma } from './sqlite.js';

const PG_URL = process.env.TETHER_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

interface Engine {
  name: string;
  /** Opens a new store on a fresh database; `again()` opens a second store on that same database. */
  fresh(): Promise<{ store: RegistryStore; again(): Promise<RegistryStore>; drop(): Promise<void> }>;
}

const sqlite: Engine = {
  name: 'sqlite',
  async fresh() {
    const dir = mkdtempSync(join(tmpdir(), 'registry-store-'));
    const path = join(dir, 'registry.db');
    return {
      store: openSqliteStore(path),
      again: async () => openSqliteStore(path),
      drop: async () => rmSync(dir, { recursive: true, force: true }),
    };
  },
};

const postgres: Engine = {
  name: 'postgres',
  async fresh() {
    const schema = `registry_test_${randomBytes(6).toString('hex')}`;
    const open = () => openPostgresStore({ connectionString: PG_URL, schema, max: 4 });
    return {
      store: await open(),
      again: open,
      drop: async () => {
        const client = new pg.Client({ connectionString: PG_URL });
        await client.connect();
        await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        await client.end();
      },
    };
  },
};

const key = (over: Partial<{ id: string; tokenHash: string }> = {}) => ({
  id: over.id ?? `key-${randomBytes(4).toString('hex')}`,
  tokenHash: over.tokenHash ?? randomBytes(32).toString('hex'),
  role: 'executor' as const,
  environments: 'dev-*',
  label: 'ci',
  createdAt: 1_000,
});

const registration = (environmentId: string, registrationId: string) => ({
  environmentId,
  registrationId,
  securityProfile: 'noise_hybrid_ik_v1',
  executorPublicKey: '{"suite":"s"}',
  apiKeyId: 'key-1',
  createdAt: 2_000,
  relayUrl: 'ws://a' as string | null,
});

/** Creates the active executor key `id` that registrations are made with (putRegistration checks it). */
const executorKey = (store: RegistryStore, id = 'key-1') => store.createApiKey(key({ id }));

const authorization = (tokenHash: string, expiresAt = 10_000) => ({
  tokenHash,
  environmentId: 'dev-1',
  registrationId: 'reg-1',
  harnessPublicKey: '{"harness":1}',
  expiresAt,
});

describe.each([sqlite, postgres])('RegistryStore on $name', (engine) => {
  let store: RegistryStore;
  let extra: RegistryStore[];
  let db: Awaited<ReturnType<Engine['fresh']>>;

  beforeEach(async () => {
    db = await engine.fresh();
    store = db.store;
    extra = [];
  });
  afterEach(async () => {
    for (const s of extra) await s.close();
    await store.close();
    await db.drop();
  });

  it('reports its engine and answers ping', async () => {
    expect(store.engine).toBe(engine.name);
    await expect(store.ping()).resolves.toBeUndefined();
  });

  it('migrations are idempotent: a second open of the same database keeps the data', async () => {
    await store.createApiKey(key({ id: 'k1' }));
    const second = await db.again();
    extra.push(second);
    expect((await second.listApiKeys()).map((k) => k.id)).toEqual(['k1']);
  });

  it('finds keys by hash only while unrevoked', async () => {
    const k = key({ id: 'k1', tokenHash: 'a'.repeat(64) });
    await store.createApiKey(k);
    expect(await store.findApiKey('a'.repeat(64))).toEqual({
      id: 'k1',
      role: 'executor',
      environments: 'dev-*',
      label: 'ci',
      createdAt: 1_000,
      revokedAt: null,
      relayUrl: null,
    });
    expect(await store.findApiKey('b'.repeat(64))).toBeUndefined();
    expect(await store.revokeApiKey('k1', 5_000)).toEqual({ registrations: [] });
    expect(await store.revokeApiKey('k1', 6_000)).toBeNull();
    expect(await store.revokeApiKey('nope', 6_000)).toBeNull();
    expect(await store.findApiKey('a'.repeat(64))).toBeUndefined();
    expect((await store.listApiKeys())[0]?.revokedAt).toBe(5_000);
  });

  it('rejects a duplicate token hash', async () => {
    await store.createApiKey(key({ id: 'k1', tokenHash: 'c'.repeat(64) }));
    await expect(store.createApiKey(key({ id: 'k2', tokenHash: 'c'.repeat(64) }))).rejects.toThrow();
  });

  it('keeps one current registration per environment; a new one replaces it', async () => {
    await executorKey(store);
    expect(await store.currentRegistration('dev-1')).toBeUndefined();
    await store.putRegistration(registration('dev-1', 'reg-1'));
    await store.putRegistration(registration('dev-2', 'reg-2'));
    await store.putRegistration({ ...registration('dev-1', 'reg-3'), createdAt: 3_000 });
    expect(await store.currentRegistration('dev-1')).toEqual({
      ...registration('dev-1', 'reg-3'),
      createdAt: 3_000,
      epoch: 2,
    });
    const environments = await store.listEnvironments();
    expect(environments.map((e) => [e.environmentId, e.createdAt, e.registration?.registrationId])).toEqual([
      ['dev-1', 2_000, 'reg-3'],
      ['dev-2', 2_000, 'reg-2'],
    ]);
  });

  it('revokes a registration only by its current id', async () => {
    await executorKey(store);
    await store.putRegistration(registration('dev-1', 'reg-1'));
    expect(await store.revokeRegistration('dev-1', 'reg-0', 9_000)).toBeNull();
    expect(await store.revokeRegistration('dev-1', 'reg-1', 9_000)).toEqual({
      environmentId: 'dev-1',
      registrationId: 'reg-1',
      revokedAt: 9_000,
    });
    expect(await store.currentRegistration('dev-1')).toBeUndefined();
    expect((await store.listEnvironments())[0]?.registration).toBeNull();
  });

  it('consumes an authorization once, only with every field matching and before expiry', async () => {
    await store.createAuthorization(authorization('t1'));
    const claim = { ...authorization('t1'), now: 5_000 };
    expect(await store.consumeAuthorization({ ...claim, environmentId: 'dev-2' })).toBeNull();
    expect(await store.consumeAuthorization({ ...claim, registrationId: 'reg-2' })).toBeNull();
    expect(await store.consumeAuthorization({ ...claim, harnessPublicKey: '{"harness":2}' })).toBeNull();
    expect(await store.consumeAuthorization({ ...claim, tokenHash: 't2' })).toBeNull();
    expect(await store.consumeAuthorization({ ...claim, now: 10_000 })).toBeNull();
    expect(await store.consumeAuthorization(claim)).not.toBeNull();
    expect(await store.consumeAuthorization(claim)).toBeNull();
  });

  it('a claim naming an API key also needs the current registration, made with that key', async () => {
    await store.createAuthorization(authorization('t1'));
    const claim = { ...authorization('t1'), now: 5_000, apiKeyId: 'key-1' };
    await executorKey(store);
    expect(await store.consumeAuthorization(claim)).toBeNull(); // no registration yet
    await store.putRegistration(registration('dev-1', 'reg-1'));
    expect(await store.consumeAuthorization({ ...claim, apiKeyId: 'key-2' })).toBeNull();
    await store.putRegistration(registration('dev-1', 'reg-2'));
    expect(await store.consumeAuthorization(claim)).toBeNull(); // superseded
    await store.putRegistration(registration('dev-1', 'reg-1'));
    expect(await store.consumeAuthorization(claim)).not.toBeNull(); // it survived the refused attempts
    expect(await store.consumeAuthorization(claim)).toBeNull();
  });

  it('creates an authorization for the current registration only, returning it', async () => {
    const a = { tokenHash: 't1', environmentId: 'dev-1', harnessPublicKey: '{"harness":1}', expiresAt: 10_000 };
    expect(await store.createAuthorizationForCurrent(a)).toBeUndefined();
    expect(await store.consumeAuthorization({ ...authorization('t1'), now: 5_000 })).toBeNull(); // none created
    await executorKey(store);
    await store.putRegistration(registration('dev-1', 'reg-1'));
    await store.putRegistration(registration('dev-1', 'reg-2'));
    expect(await store.createAuthorizationForCurrent(a)).toEqual({ ...registration('dev-1', 'reg-2'), epoch: 2 });
    expect(await store.consumeAuthorization({ ...authorization('t1'), now: 5_000 })).toBeNull(); // not for reg-1
    const claim = { ...authorization('t1'), registrationId: 'reg-2', now: 5_000, apiKeyId: 'key-1' };
    expect(await store.consumeAuthorization(claim)).not.toBeNull();
  });

  it("keeps the /connect's request id with an authorization and gives it back when it is consumed", async () => {
    await store.createAuthorization({ ...authorization('t1'), connectRequestId: 'req-connect-1' });
    await store.createAuthorization(authorization('t2'));
    expect(await store.consumeAuthorization({ ...authorization('t1'), now: 5_000 })).toEqual({
      connectRequestId: 'req-connect-1',
      mintedByKeyId: null,
      mintedByRole: null,
    });
    expect(await store.consumeAuthorization({ ...authorization('t2'), now: 5_000 })).toEqual({
      connectRequestId: null,
      mintedByKeyId: null,
      mintedByRole: null,
    });
    await executorKey(store);
    await store.putRegistration(registration('dev-1', 'reg-1'));
    const current = { tokenHash: 't3', environmentId: 'dev-1', harnessPublicKey: '{"harness":1}', expiresAt: 10_000 };
    await store.createAuthorizationForCurrent({ ...current, connectRequestId: 'req-connect-3' });
    const claim = { ...authorization('t3'), now: 5_000, apiKeyId: 'key-1' };
    expect(await store.consumeAuthorization(claim)).toEqual({
      connectRequestId: 'req-connect-3',
      mintedByKeyId: null,
      mintedByRole: null,
    });
  });

  it('an authorization minted with a key that has since been revoked is refused; one from an active key is not', async () => {
    await store.createApiKey({ ...key({ id: 'harness-1' }), role: 'harness' });
    await store.createApiKey({ ...key({ id: 'harness-2' }), role: 'harness' });
    await store.createAuthorization({ ...authorization('t1'), mintedByKeyId: 'harness-1' });
    await store.createAuthorization({ ...authorization('t2'), mintedByKeyId: 'harness-2' });
    await executorKey(store);
    await store.putRegistration(registration('dev-1', 'reg-1'));
    const current = { tokenHash: 't3', environmentId: 'dev-1', harnessPublicKey: '{"harness":1}', expiresAt: 10_000 };
    await store.createAuthorizationForCurrent({ ...current, mintedByKeyId: 'harness-1' });
    expect(await store.revokeApiKey('harness-1', 3_000)).not.toBeNull();
    expect(await store.consumeAuthorization({ ...authorization('t1'), now: 5_000 })).toBeNull();
    expect(await store.consumeAuthorization({ ...authorization('t3'), now: 5_000, apiKeyId: 'key-1' })).toBeNull();
    expect(await store.consumeAuthorization({ ...authorization('t2'), now: 5_000 })).not.toBeNull();
  });

  it('gives back the key that minted a consumed authorization and its role', async () => {
    await store.createApiKey({ ...key({ id: 'harness-1' }), role: 'harness' });
    await store.createApiKey({ ...key({ id: 'admin-1' }), role: 'admin' });
    await store.createAuthorization({ ...authorization('t1'), mintedByKeyId: 'harness-1', connectRequestId: 'c1' });
    await store.createAuthorization({ ...authorization('t2'), mintedByKeyId: 'admin-1' });
    await executorKey(store);
    await store.putRegistration(registration('dev-1', 'reg-1'));
    const current = { tokenHash: 't3', environmentId: 'dev-1', harnessPublicKey: '{"harness":1}', expiresAt: 10_000 };
    await store.createAuthorizationForCurrent({ ...current, mintedByKeyId: 'harness-1' });
    expect(await store.consumeAuthorization({ ...authorization('t1'), now: 5_000 })).toEqual({
      connectRequestId: 'c1',
      mintedByKeyId: 'harness-1',
      mintedByRole: 'harness',
    });
    expect(await store.consumeAuthorization({ ...authorization('t2'), now: 5_000 })).toEqual({
      connectRequestId: null,
      mintedByKeyId: 'admin-1',
      mintedByRole: 'admin',
    });
    expect(await store.consumeAuthorization({ ...authorization('t3'), now: 5_000, apiKeyId: 'key-1' })).toEqual({
      connectRequestId: null,
      mintedByKeyId: 'harness-1',
      mintedByRole: 'harness',
    });
  });

  it('prunes expired authorizations', async () => {
    await store.createAuthorization(authorization('old', 1_000));
    await store.createAuthorization(authorization('new', 9_000));
    expect(await store.pruneAuthorizations(5_000)).toBe(1);
    expect(await store.consumeAuthorization({ ...authorization('new'), now: 2_000 })).not.toBeNull();
  });

  it('an authorization stays single-use under concurrent consumption from two store instances', async () => {
    const second = await db.again();
    extra.push(second);
    for (let round = 0; round < 5; round++) {
      const token = `race-${round}`;
      await store.createAuthorization(authorization(token));
      const claim = { ...authorization(token), now: 5_000 };
      const results = await Promise.all(
        Array.from({ length: 16 }, (_, i) => (i % 2 ? second : store).consumeAuthorization(claim)),
      );
      expect(results.filter(Boolean)).toHaveLength(1);
    }
  });

  it('epochs rise by one per registration of an environment and never repeat, even after a revocation', async () => {
    await executorKey(store);
    expect(await store.putRegistration(registration('dev-1', 'reg-1'))).toEqual({ ok: true, epoch: 1 });
    expect(await store.putRegistration(registration('dev-1', 'reg-2'))).toEqual({ ok: true, epoch: 2 });
    expect(await store.putRegistration(registration('dev-2', 'reg-3'))).toEqual({ ok: true, epoch: 1 });
    await store.revokeRegistration('dev-1', 'reg-2', 3_000);
    expect(await store.putRegistration(registration('dev-1', 'reg-4'))).toEqual({ ok: true, epoch: 3 });
    expect((await store.currentRegistration('dev-1'))?.epoch).toBe(3);
    expect((await store.listEnvironments()).map((e) => e.registration?.epoch)).toEqual([3, 1]);
  });

  it('binds an environment to the first key that registers it; another key is refused until an admin transfers it', async () => {
    await executorKey(store, 'key-1');
    await executorKey(store, 'key-2');
    expect((await store.putRegistration(registration('dev-1', 'reg-1'))).ok).toBe(true);
    const stolen = { ...registration('dev-1', 'reg-2'), apiKeyId: 'key-2' };
    expect(await store.putRegistration(stolen)).toEqual({ ok: false, reason: 'environment_owned' });
    expect((await store.currentRegistration('dev-1'))?.registrationId).toBe('reg-1');
    expect((await store.listEnvironments())[0]?.ownerKeyId).toBe('key-1');
    expect(await store.setEnvironmentOwner('dev-1', 'key-2', 4_000)).toBe(true);
    expect(await store.putRegistration(stolen)).toEqual({ ok: true, epoch: 2 });
    expect(await store.putRegistration(registration('dev-1', 'reg-3'))).toEqual({
      ok: false,
      reason: 'environment_owned',
    });
    // Only to an active executor key; an unknown environment is created already bound.
    await store.createApiKey({ ...key({ id: 'harness-1' }), role: 'harness' });
    expect(await store.setEnvironmentOwner('dev-1', 'harness-1', 4_000)).toBe(false);
    expect(await store.setEnvironmentOwner('dev-1', 'nope', 4_000)).toBe(false);
    expect(await store.setEnvironmentOwner('dev-5', 'key-1', 4_000)).toBe(true);
    const dev5 = (await store.listEnvironments()).find((e) => e.environmentId === 'dev-5');
    expect(dev5).toMatchObject({ ownerKeyId: 'key-1', registration: null });
    await store.revokeApiKey('key-2', 5_000);
    expect(await store.setEnvironmentOwner('dev-1', 'key-2', 6_000)).toBe(false);
  });

  it('revoking a key revokes its current registrations in the same step, records them and drops their authorizations', async () => {
    await executorKey(store, 'key-1');
    await executorKey(store, 'key-2');
    await store.putRegistration(registration('dev-1', 'reg-1'));
    await store.putRegistration(registration('dev-2', 'reg-2'));
    await store.putRegistration({ ...registration('dev-3', 'reg-3'), apiKeyId: 'key-2' });
    await store.createAuthorization(authorization('t1'));
    const revoked = await store.revokeApiKey('key-1', 7_000);
    expect(revoked?.registrations.sort((a, b) => a.environmentId.localeCompare(b.environmentId))).toEqual([
      { environmentId: 'dev-1', registrationId: 'reg-1', revokedAt: 7_000 },
      { environmentId: 'dev-2', registrationId: 'reg-2', revokedAt: 7_000 },
    ]);
    expect(await store.currentRegistration('dev-1')).toBeUndefined();
    expect((await store.currentRegistration('dev-3'))?.registrationId).toBe('reg-3');
    expect(await store.registrationRevoked('dev-1')).toBe(true);
    expect(await store.registrationRevoked('dev-3')).toBe(false);
    expect(await store.registrationRevoked('dev-9')).toBe(false);
    expect((await store.listRevokedRegistrations(0, 10)).map((r) => r.registrationId).sort()).toEqual([
      'reg-1',
      'reg-2',
    ]);
    expect(await store.consumeAuthorization({ ...authorization('t1'), now: 5_000 })).toBeNull();
    // The revoked key cannot register again: the check is part of the registration step.
    expect(await store.putRegistration(registration('dev-1', 'reg-4'))).toEqual({ ok: false, reason: 'key_revoked' });
  });

  it('lists revocations newest first, from a time on, at most a limit; a new registration is current again', async () => {
    await executorKey(store);
    for (const [i, at] of [1_000, 2_000, 3_000].entries()) {
      await store.putRegistration(registration(`dev-${i}`, `reg-${i}`));
      await store.revokeRegistration(`dev-${i}`, `reg-${i}`, at);
    }
    expect((await store.listRevokedRegistrations(1_500, 10)).map((r) => r.revokedAt)).toEqual([3_000, 2_000]);
    expect((await store.listRevokedRegistrations(0, 2)).map((r) => r.registrationId)).toEqual(['reg-2', 'reg-1']);
    expect(await store.registrationRevoked('dev-0')).toBe(true);
    await store.putRegistration(registration('dev-0', 'reg-9'));
    expect(await store.registrationRevoked('dev-0')).toBe(false);
  });

  it('concurrent first registrations by two keys on two store instances: one key owns it, epochs stay distinct', async () => {
    const second = await db.again();
    extra.push(second);
    await executorKey(store, 'key-1');
    await executorKey(store, 'key-2');
    for (let round = 0; round < 5; round++) {
      const env = `race-${round}`;
      const results = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          (i % 2 ? second : store).putRegistration({
            ...registration(env, `reg-${round}-${i}`),
            apiKeyId: i % 4 < 2 ? 'key-1' : 'key-2',
          }),
        ),
      );
      const owner = (await store.listEnvironments()).find((e) => e.environmentId === env)?.ownerKeyId;
      const accepted = results.flatMap((r, i) => (r.ok ? [{ i, epoch: r.epoch }] : []));
      // Every accepted registration used the owner's key; every refused one the other key.
      for (const [i, r] of results.entries()) {
        expect(r.ok).toBe((i % 4 < 2 ? 'key-1' : 'key-2') === owner);
      }
      expect(new Set(accepted.map((a) => a.epoch)).size).toBe(accepted.length);
      expect((await store.currentRegistration(env))?.epoch).toBe(Math.max(...accepted.map((a) => a.epoch)));
    }
  });

  it('keeps a relay key and its node URL', async () => {
    await store.createApiKey({ ...key({ id: 'r1', tokenHash: 'd'.repeat(64) }), role: 'relay', relayUrl: 'ws://a:1' });
    expect(await store.findApiKey('d'.repeat(64))).toMatchObject({ role: 'relay', relayUrl: 'ws://a:1' });
  });

  it('tracks relay node presence by last heartbeat', async () => {
    await store.heartbeatRelayNode('ws://b', 1_000);
    await store.heartbeatRelayNode('ws://a', 2_000);
    await store.heartbeatRelayNode('ws://b', 3_000);
    expect(await store.liveRelayNodes(2_000)).toEqual([
      { url: 'ws://a', lastSeen: 2_000 },
      { url: 'ws://b', lastSeen: 3_000 },
    ]);
    expect(await store.liveRelayNodes(2_500)).toEqual([{ url: 'ws://b', lastSeen: 3_000 }]);
  });

  it('links a reported environment to a node only where its current registration sent the executor', async () => {
    await executorKey(store);
    await store.putRegistration(registration('dev-1', 'reg-1'));
    await store.putRegistration({ ...registration('dev-2', 'reg-2'), relayUrl: 'ws://b' });
    expect(await store.relayLink('dev-1')).toBeUndefined();
    await store.heartbeatRelayNode('ws://a', 1_000, ['dev-1', 'dev-2', 'dev-1', 'dev-unregistered']);
    await store.heartbeatRelayNode('ws://b', 2_000, ['dev-2', 'dev-1']);
    await store.heartbeatRelayNode('ws://a', 3_000, []);
    // ws://a's last heartbeat (3 000) no longer listed dev-1; ws://b's last one listed dev-2.
    expect(await store.relayLink('dev-1')).toEqual({
      environmentId: 'dev-1',
      relayUrl: 'ws://a',
      lastSeen: 1_000,
      nodeLastSeen: 3_000,
    });
    expect(await store.relayLink('dev-2')).toEqual({
      environmentId: 'dev-2',
      relayUrl: 'ws://b',
      lastSeen: 2_000,
      nodeLastSeen: 2_000,
    });
    expect(await store.relayLink('dev-unregistered')).toBeUndefined();
    expect(await store.liveRelayNodes(0)).toEqual([
      { url: 'ws://a', lastSeen: 3_000 },
      { url: 'ws://b', lastSeen: 2_000 },
    ]);
    // The executor failed over: its new registration names ws://b, so ws://b's reports count from now on.
    await store.putRegistration({ ...registration('dev-1', 'reg-3'), relayUrl: 'ws://b' });
    expect((await store.currentRegistration('dev-1'))?.relayUrl).toBe('ws://b');
    await store.heartbeatRelayNode('ws://b', 4_000, ['dev-1']);
    expect(await store.relayLink('dev-1')).toEqual({
      environmentId: 'dev-1',
      relayUrl: 'ws://b',
      lastSeen: 4_000,
      nodeLastSeen: 4_000,
    });
  });

  it('a registration that names no node (made before the registry recorded one) is linked wherever reported', async () => {
    await executorKey(store);
    await store.putRegistration({ ...registration('dev-1', 'reg-1'), relayUrl: null });
    expect((await store.currentRegistration('dev-1'))?.relayUrl).toBeNull();
    await store.heartbeatRelayNode('ws://a', 1_000, ['dev-1']);
    await store.heartbeatRelayNode('ws://b', 2_000, ['dev-1']);
    expect(await store.relayLink('dev-1')).toEqual({
      environmentId: 'dev-1',
      relayUrl: 'ws://b',
      lastSeen: 2_000,
      nodeLastSeen: 2_000,
    });
  });
});

describe.each([sqlite, postgres])('RegistryStore read caches on $name', (engine) => {
  let db: Awaited<ReturnType<Engine['fresh']>>;
  const opened: RegistryStore[] = [];
  beforeEach(async () => {
    db = await engine.fresh();
    opened.push(db.store);
  });
  afterEach(async () => {
    for (const s of opened.splice(0)) await s.close();
    await db.drop();
  });

  it('a cached key stops being found as soon as this store revokes it', async () => {
    await db.store.createApiKey(key({ id: 'k1', tokenHash: 'a'.repeat(64) }));
    expect((await db.store.findApiKey('a'.repeat(64)))?.id).toBe('k1');
    expect((await db.store.findApiKey('a'.repeat(64)))?.id).toBe('k1');
    expect(await db.store.revokeApiKey('k1', 5_000)).not.toBeNull();
    expect(await db.store.findApiKey('a'.repeat(64))).toBeUndefined();
  });

  it('registration lookups follow replacements and revocations by this store at once', async () => {
    expect(await db.store.currentRegistration('dev-1')).toBeUndefined();
    await executorKey(db.store);
    await db.store.putRegistration(registration('dev-1', 'reg-1'));
    expect((await db.store.currentRegistration('dev-1'))?.registrationId).toBe('reg-1');
    await db.store.putRegistration(registration('dev-1', 'reg-2'));
    expect((await db.store.currentRegistration('dev-1'))?.registrationId).toBe('reg-2');
    expect(await db.store.revokeRegistration('dev-1', 'reg-2', 3_000)).not.toBeNull();
    expect(await db.store.currentRegistration('dev-1')).toBeUndefined();
  });

  it('a returned key is a copy: mutating it does not change what the next lookup sees', async () => {
    await db.store.createApiKey(key({ id: 'k1', tokenHash: 'a'.repeat(64) }));
    const found = await db.store.findApiKey('a'.repeat(64));
    if (found) found.role = 'admin';
    expect((await db.store.findApiKey('a'.repeat(64)))?.role).toBe('executor');
  });

  it('heartbeats through this store are seen at once by cached presence and link lookups', async () => {
    await executorKey(db.store);
    await db.store.putRegistration(registration('dev-1', 'reg-1'));
    expect(await db.store.liveRelayNodes(0)).toEqual([]);
    expect(await db.store.relayLink('dev-1')).toBeUndefined();
    await db.store.heartbeatRelayNode('ws://a', 1_000, ['dev-1']);
    expect(await db.store.liveRelayNodes(0)).toEqual([{ url: 'ws://a', lastSeen: 1_000 }]);
    expect(await db.store.relayLink('dev-1')).toEqual({
      environmentId: 'dev-1',
      relayUrl: 'ws://a',
      lastSeen: 1_000,
      nodeLastSeen: 1_000,
    });
    await db.store.heartbeatRelayNode('ws://a', 2_000, []);
    expect(await db.store.liveRelayNodes(1_500)).toEqual([{ url: 'ws://a', lastSeen: 2_000 }]);
    expect(await db.store.relayLink('dev-1')).toMatchObject({ lastSeen: 1_000, nodeLastSeen: 2_000 });
  });

  it('a consumed authorization is gone: prune finds nothing left of it', async () => {
    await db.store.createAuthorization(authorization('t1'));
    expect(await db.store.consumeAuthorization({ ...authorization('t1'), now: 5_000 })).not.toBeNull();
    expect(await db.store.pruneAuthorizations(Number.MAX_SAFE_INTEGER)).toBe(0);
  });
});

it('SQLite caches are exact across connections: revocations, new keys and heartbeats by another connection', async () => {
  const db = await sqlite.fresh();
  const other = await db.again();
  try {
    await db.store.createApiKey(key({ id: 'k1', tokenHash: 'a'.repeat(64) }));
    expect((await db.store.findApiKey('a'.repeat(64)))?.id).toBe('k1');
    await executorKey(db.store, 'key-1');
    await db.store.putRegistration(registration('dev-1', 'reg-1'));
    expect(await db.store.liveRelayNodes(0)).toEqual([]);
    expect(await db.store.relayLink('dev-1')).toBeUndefined();
    // As `registry keys revoke|create` would, from another process.
    expect(await other.revokeApiKey('k1', 5_000)).toEqual({ registrations: [] });
    await other.createApiKey(key({ id: 'k2', tokenHash: 'b'.repeat(64) }));
    await other.heartbeatRelayNode('ws://a', 1_000, ['dev-1']);
    expect(await db.store.findApiKey('a'.repeat(64))).toBeUndefined();
    expect(await db.store.currentRegistration('dev-9')).toBeUndefined();
    await other.putRegistration(registration('dev-9', 'reg-9'));
    expect((await db.store.currentRegistration('dev-9'))?.registrationId).toBe('reg-9');
    expect(await other.revokeRegistration('dev-9', 'reg-9', 6_000)).not.toBeNull();
    expect(await db.store.currentRegistration('dev-9')).toBeUndefined();
    expect((await db.store.findApiKey('b'.repeat(64)))?.id).toBe('k2');
    expect(await db.store.liveRelayNodes(0)).toEqual([{ url: 'ws://a', lastSeen: 1_000 }]);
    expect((await db.store.relayLink('dev-1'))?.relayUrl).toBe('ws://a');
  } finally {
    await other.close();
    await db.store.close();
    await db.drop();
  }
});

describe('SQLite group commit', () => {
  let db: Awaited<ReturnType<Engine['fresh']>>;
  let other: RegistryStore;
  beforeEach(async () => {
    db = await sqlite.fresh();
    other = await db.again();
  });
  afterEach(async () => {
    await other.close();
    await db.store.close();
    await db.drop();
  });

  it('writes of one turn are acknowledged once committed: another connection then sees every one', async () => {
    await Promise.all([
      db.store.createAuthorization(authorization('t1')),
      db.store.createAuthorization(authorization('t2')),
      db.store.createApiKey(key({ id: 'k1', tokenHash: 'a'.repeat(64) })),
    ]);
    expect((await other.listApiKeys()).map((k) => k.id)).toEqual(['k1']);
    expect(await other.consumeAuthorization({ ...authorization('t1'), now: 5_000 })).not.toBeNull();
    expect(await other.consumeAuthorization({ ...authorization('t2'), now: 5_000 })).not.toBeNull();
  });

  it('a failing write is rejected alone; the rest of its batch commits', async () => {
    await db.store.createApiKey(key({ id: 'k1', tokenHash: 'a'.repeat(64) }));
    const results = await Promise.allSettled([
      db.store.createAuthorization(authorization('t1')),
      db.store.createApiKey(key({ id: 'k2', tokenHash: 'a'.repeat(64) })),
      db.store.createAuthorization(authorization('t2')),
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(await other.pruneAuthorizations(Number.MAX_SAFE_INTEGER)).toBe(2);
  });

  it('two connections in one process writing in the same turn do not wait on each other', async () => {
    const writes = [];
    for (let i = 0; i < 6; i++) {
      writes.push((i % 2 ? other : db.store).createAuthorization(authorization(`t${i}`)));
    }
    await Promise.all(writes);
    const claims = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        (i % 2 ? db.store : other).consumeAuthorization({ ...authorization(`t${i}`), now: 5_000 }),
      ),
    );
    expect(claims).toEqual(Array(6).fill({ connectRequestId: null, mintedByKeyId: null, mintedByRole: null }));
  });

  it('close commits a pending batch', async () => {
    const pending = db.store.createAuthorization(authorization('t1'));
    await db.store.close();
    await pending;
    expect(await other.consumeAuthorization({ ...authorization('t1'), now: 5_000 })).not.toBeNull();
  });
});

it("PostgreSQL with cacheTtlMs 0 sees another replica's revocation at once", async () => {
  const db = await postgres.fresh();
  await db.store.close();
  const schema = `registry_test_${randomBytes(6).toString('hex')}`;
  const a = await openPostgresStore({ connectionString: PG_URL, schema, max: 2, cacheTtlMs: 0 });
  const b = await openPostgresStore({ connectionString: PG_URL, schema, max: 2, cacheTtlMs: 0 });
  try {
    await a.createApiKey(key({ id: 'k1', tokenHash: 'a'.repeat(64) }));
    expect((await a.findApiKey('a'.repeat(64)))?.id).toBe('k1');
    expect(await b.revokeApiKey('k1', 5_000)).not.toBeNull();
    expect(await a.findApiKey('a'.repeat(64))).toBeUndefined();
  } finally {
    await a.close();
    await b.close();
    await db.drop();
    const client = new pg.Client({ connectionString: PG_URL });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await client.end();
  }
});

describe('openStore', () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it('opens sqlite: URLs, creating the parent directory', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'registry-open-'));
    dirs.push(dir);
    const store = await openStore(`sqlite:${join(dir, 'nested', 'r.db')}`);
    expect(store.engine).toBe('sqlite');
    await store.close();
  });

  it('SQLite files are in WAL mode', async () => {
    const path = (await import('node:path')).join(tmpdir(), `registry-wal-${randomBytes(4).toString('hex')}.db`);
    const s = openSqliteStore(path);
    await s.close();
    const Database = (await import('better-sqlite3')).default;
    const db = new Database(path);
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    db.close();
    rmSync(path, { force: true });
    rmSync(`${path}-wal`, { force: true });
    rmSync(`${path}-shm`, { force: true });
  });

  it('SQLite registry connections commit with synchronous=FULL', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'registry-sync-'));
    dirs.push(dir);
    const store = openSqliteStore(join(dir, 'r.db'));
    try {
      expect(sqlitePragma(store, 'synchronous')).toBe(2); // 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA
    } finally {
      await store.close();
    }
  });

  it('opens postgres URLs in the requested schema', async () => {
    const schema = `registry_test_${randomBytes(6).toString('hex')}`;
    const store = await openStore(PG_URL, { schema });
    expect(store.engine).toBe('postgres');
    await store.close();
    const client = new pg.Client({ connectionString: PG_URL });
    await client.connect();
    await client.query(`DROP SCHEMA ${schema} CASCADE`);
    await client.end();
  });

  it('refuses other URLs and bad schema names', async () => {
    await expect(openStore('mysql://x')).rejects.toThrow(/sqlite:PATH or postgres/);
    await expect(openPostgresStore({ connectionString: PG_URL, schema: 'x; DROP' })).rejects.toThrow(/invalid schema/);
  });
});

describe('migration to version 3', () => {
  const seed = [
    "INSERT INTO api_keys (id, token_hash, role, environments, label, created_at) VALUES ('k1', 'h1', 'executor', '*', '', 1)",
    "INSERT INTO environments (id, created_at) VALUES ('dev-1', 1)",
    "INSERT INTO environments (id, created_at) VALUES ('dev-2', 1)",
    `INSERT INTO registrations (environment_id, registration_id, security_profile, executor_public_key, api_key_id,
       created_at) VALUES ('dev-1', 'reg-1', 'p', '{}', 'k1', 2)`,
  ];

  /** Checks a store opened on a version-2 database holding `seed`. */
  async function checkMigrated(store: RegistryStore) {
    expect((await store.listApiKeys())[0]).toMatchObject({ id: 'k1', role: 'executor', relayUrl: null });
    const environments = await store.listEnvironments();
    expect(environments.map((e) => [e.environmentId, e.ownerKeyId, e.registration?.epoch ?? null])).toEqual([
      ['dev-1', 'k1', 0],
      ['dev-2', null, null],
    ]);
    await store.createApiKey({ ...key({ id: 'r1' }), role: 'relay', relayUrl: 'ws://a:1' });
    // The registering key owns its environment; the next epoch follows the migrated one.
    expect(await store.putRegistration({ ...registration('dev-1', 'reg-2'), apiKeyId: 'k1' })).toEqual({
      ok: true,
      epoch: 1,
    });
  }

  it('SQLite: keeps keys and registrations, binds environments to the key that registered them', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'registry-migrate-'));
    const path = join(dir, 'r.db');
    const Database = (await import('better-sqlite3')).default;
    const old = new Database(path);
    old.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY)');
    for (const m of SQLITE_MIGRATIONS.filter((m) => m.version <= 2)) {
      old.exec(m.sql);
      old.prepare('INSERT INTO schema_migrations (version) VALUES (?)').run(m.version);
    }
    for (const sql of seed) old.exec(sql);
    old.close();
    const store = openSqliteStore(path);
    try {
      await checkMigrated(store);
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('PostgreSQL: keeps keys and registrations, binds environments to the key that registered them', async () => {
    const schema = `registry_test_${randomBytes(6).toString('hex')}`;
    const client = new pg.Client({ connectionString: PG_URL, options: `-c search_path=${schema}` });
    await client.connect();
    let store: RegistryStore | undefined;
    try {
      await client.query(`CREATE SCHEMA ${schema}`);
      await client.query('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY)');
      for (const m of POSTGRES_MIGRATIONS.filter((m) => m.version <= 2)) {
        await client.query(m.sql);
        await client.query('INSERT INTO schema_migrations (version) VALUES ($1)', [m.version]);
      }
      for (const sql of seed) await client.query(sql);
      store = await openPostgresStore({ connectionString: PG_URL, schema, max: 2 });
      await checkMigrated(store);
    } finally {
      await store?.close();
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await client.end();
    }
  });
});
