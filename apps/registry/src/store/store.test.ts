import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  authorization,
  type Engine,
  executorKey,
  key,
  postgres,
  registration,
  sqlite,
} from '../__tests__/store-fixtures.js';
import type { RegistryStore } from './index.js';

/**
 * The relay link of `environmentId` as the store answers it: reported by `relayUrl` at `lastSeen`, that node last
 * heard from at `nodeLastSeen`.
 */
const link = (environmentId: string, relayUrl: string, lastSeen: number, nodeLastSeen: number) => ({
  environmentId,
  relayUrl,
  lastSeen,
  nodeLastSeen,
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
      access: 'full',
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
      mintedByAccess: null,
      linkSession: null,
    });
    expect(await store.consumeAuthorization({ ...authorization('t2'), now: 5_000 })).toEqual({
      connectRequestId: null,
      mintedByKeyId: null,
      mintedByRole: null,
      mintedByAccess: null,
      linkSession: null,
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
      mintedByAccess: null,
      linkSession: null,
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

  it('keeps a key view-only, and says so of the authorizations it mints', async () => {
    await store.createApiKey({
      ...key({ id: 'viewer-1', tokenHash: 'v'.repeat(64) }),
      role: 'harness',
      access: 'view',
    });
    expect(await store.findApiKey('v'.repeat(64))).toMatchObject({ id: 'viewer-1', access: 'view' });
    await store.createAuthorization({ ...authorization('t1'), mintedByKeyId: 'viewer-1' });
    expect(await store.consumeAuthorization({ ...authorization('t1'), now: 5_000 })).toMatchObject({
      mintedByKeyId: 'viewer-1',
      mintedByAccess: 'view',
    });
  });

  it('carries a share link’s access from grant to session, and its session id from /connect to /validate', async () => {
    await store.createApiKey({ ...key({ id: 'harness-1' }), role: 'harness' });
    for (const [grant, shareAccess] of [
      ['g-view', 'view'],
      ['g-control', 'control'],
      ['g-plain', null],
    ] as const) {
      await store.createBrowserGrant({
        tokenHash: grant,
        environmentId: 'dev-1',
        apiKeyId: 'harness-1',
        expiresAt: 10_000,
        shareAccess,
      });
      const session = await store.exchangeBrowserGrant({
        grantHash: grant,
        sessionHash: `s-${grant}`,
        sessionExpiresAt: 20_000,
        now: 1_000,
      });
      expect(session).toEqual({ environmentId: 'dev-1', apiKeyId: 'harness-1', expiresAt: 20_000, shareAccess });
      expect(await store.findBrowserSession(`s-${grant}`, 2_000)).toEqual(session);
    }
    const linkSession = { id: 'lnk_1', access: 'control' as const };
    await store.createAuthorization({ ...authorization('t1'), mintedByKeyId: 'harness-1', linkSession });
    await store.createAuthorization({ ...authorization('t2'), mintedByKeyId: 'harness-1' });
    await executorKey(store);
    await store.putRegistration(registration('dev-1', 'reg-1'));
    const current = { tokenHash: 't3', environmentId: 'dev-1', harnessPublicKey: '{"harness":1}', expiresAt: 10_000 };
    await store.createAuthorizationForCurrent({
      ...current,
      mintedByKeyId: 'harness-1',
      linkSession: { id: 'lnk_2', access: 'view' },
    });
    expect(await store.consumeAuthorization({ ...authorization('t1'), now: 5_000 })).toMatchObject({ linkSession });
    expect(await store.consumeAuthorization({ ...authorization('t2'), now: 5_000 })).toMatchObject({
      linkSession: null,
    });
    expect(
      await store.consumeAuthorization({
        tokenHash: 't3',
        environmentId: 'dev-1',
        registrationId: 'reg-1',
        harnessPublicKey: '{"harness":1}',
        now: 5_000,
      }),
    ).toMatchObject({ linkSession: { id: 'lnk_2', access: 'view' } });
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
      mintedByAccess: 'full',
      linkSession: null,
    });
    expect(await store.consumeAuthorization({ ...authorization('t2'), now: 5_000 })).toEqual({
      connectRequestId: null,
      mintedByKeyId: 'admin-1',
      mintedByRole: 'admin',
      mintedByAccess: 'full',
      linkSession: null,
    });
    expect(await store.consumeAuthorization({ ...authorization('t3'), now: 5_000, apiKeyId: 'key-1' })).toEqual({
      connectRequestId: null,
      mintedByKeyId: 'harness-1',
      mintedByRole: 'harness',
      mintedByAccess: 'full',
      linkSession: null,
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
    expect(await store.relayLink('dev-1')).toEqual(link('dev-1', 'ws://a', 1_000, 3_000));
    expect(await store.relayLink('dev-2')).toEqual(link('dev-2', 'ws://b', 2_000, 2_000));
    expect(await store.relayLink('dev-unregistered')).toBeUndefined();
    expect(await store.liveRelayNodes(0)).toEqual([
      { url: 'ws://a', lastSeen: 3_000 },
      { url: 'ws://b', lastSeen: 2_000 },
    ]);
    // The executor failed over: its new registration names ws://b, so ws://b's reports count from now on.
    await store.putRegistration({ ...registration('dev-1', 'reg-3'), relayUrl: 'ws://b' });
    expect((await store.currentRegistration('dev-1'))?.relayUrl).toBe('ws://b');
    await store.heartbeatRelayNode('ws://b', 4_000, ['dev-1']);
    expect(await store.relayLink('dev-1')).toEqual(link('dev-1', 'ws://b', 4_000, 4_000));
  });

  it('a registration that names no node (made before the registry recorded one) is linked wherever reported', async () => {
    await executorKey(store);
    await store.putRegistration({ ...registration('dev-1', 'reg-1'), relayUrl: null });
    expect((await store.currentRegistration('dev-1'))?.relayUrl).toBeNull();
    await store.heartbeatRelayNode('ws://a', 1_000, ['dev-1']);
    await store.heartbeatRelayNode('ws://b', 2_000, ['dev-1']);
    expect(await store.relayLink('dev-1')).toEqual(link('dev-1', 'ws://b', 2_000, 2_000));
  });
});
