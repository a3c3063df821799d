/** The store's read caches, SQLite's group commit, openStore, and migrations. */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  authorization,
  type Engine,
  executorKey,
  key,
  PG_URL,
  postgres,
  registration,
  sqlite,
} from '../__tests__/store-fixtures.js';
import { openPostgresStore, openSqliteStore, openStore, type RegistryStore } from './index.js';
import { POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS } from './migrations.js';
import { sqlitePragma } from './sqlite.js';

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
    expect(claims).toEqual(
      Array(6).fill({
        connectRequestId: null,
        mintedByKeyId: null,
        mintedByRole: null,
        mintedByAccess: null,
        linkSession: null,
      }),
    );
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
