import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { BoundedCache } from '../cache.js';
import { type Checkpointer, startCheckpointer } from './checkpointer.js';
import { SQLITE_MIGRATIONS } from './migrations.js';
import {
  AUTHORIZATION_COLUMNS,
  authorizationValues,
  CACHE_ENTRIES,
  type ConsumedRow,
  consumedFrom,
  consumedReturning,
  type EnvironmentRow,
  type KeyRow,
  type RevokedRow,
  relayLinkSql,
  type SessionRow,
  shareLinkAccess,
  toBrowserSession,
  toEnvironment,
  toKey,
  toRegistration,
  toRelayLink,
  toRevoked,
} from './rows.js';
import type {
  ApiKeyRecord,
  AuthorizationClaim,
  NewApiKey,
  NewAuthorization,
  NewRegistration,
  PutRegistrationResult,
  RegistrationRecord,
  RegistryStore,
  RelayLinkRecord,
  RelayNodeRecord,
  RevokedRegistrationRecord,
} from './types.js';

/** The per-connection pragmas of a SQLite store's connection (for tests: `synchronous` is not stored in the file). */
const connections = new WeakMap<RegistryStore, Database.Database>();
export function sqlitePragma(store: RegistryStore, name: 'synchronous' | 'journal_mode' | 'busy_timeout'): unknown {
  const db = connections.get(store);
  if (!db) throw new Error('not a SQLite store');
  return db.pragma(name, { simple: true });
}

/**
 * Commits of the SQLite stores in this process that have a group commit open. A store commits the others' before
 * opening its own: two connections in one thread must never wait on each other's write lock (busy_timeout would
 * block the very thread that is to release it).
 */
const openBatches = new Set<() => void>();
const flushOtherBatches = () => {
  for (const commit of openBatches) commit();
};

export interface SqliteStoreOptions {
  /**
   * Checkpoint the WAL from a worker thread every this many ms instead of from the committing call (SQLite's
   * automatic checkpoint, which stalls the event loop for the copy and fsync); `registry serve` uses 200. Not for
   * `:memory:`.
   */
  backgroundCheckpointMs?: number;
}

/**
 * SQLite store (better-sqlite3, WAL). `path` may be `:memory:`.
 *
 * Writes are group-committed: the first write of an event-loop turn opens a transaction (BEGIN IMMEDIATE), the
 * writes of that turn run in it, and it commits from setImmediate; each write's promise settles only after that
 * commit, so nothing is acknowledged before it is committed. This costs one WAL commit per turn instead of one per
 * statement. A write sees the effects of the earlier writes of its batch (one connection), so single-use
 * authorizations stay single-use; if the commit fails, every write of the batch is rejected.
 */
export function openSqliteStore(path: string, options: SqliteStoreOptions = {}): RegistryStore {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  flushOtherBatches();
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  // FULL: a commit is on disk before any write of its batch is acknowledged, so an acknowledged registration,
  // revocation or single-use authorization survives power loss (WAL + NORMAL could lose the last commits, and with
  // them a revocation or a consumption, letting an authorization validate twice). Group commit keeps the cost to
  // one fsync per event-loop turn, not per statement.
  db.pragma('synchronous = FULL');
  db.pragma('busy_timeout = 5000');
  db.pragma('foreign_keys = ON');
  const AUTO_CHECKPOINT_PAGES = 1000; // SQLite's default
  let checkpointer: Checkpointer | undefined;
  if (options.backgroundCheckpointMs !== undefined && path !== ':memory:') {
    checkpointer = startCheckpointer(path, options.backgroundCheckpointMs, {
      // The worker's passive checkpoints do the copying and syncing, but only a checkpoint that catches up with
      // the writer lets the WAL start over. So this connection still checkpoints, rarely (every 4 000 pages,
      // 16 MiB of WAL), and then finds nearly everything copied already: a short pause instead of a long one
      // every 1 000 pages.
      onReady: () => {
        if (db.open) db.pragma(`wal_autocheckpoint = ${4 * AUTO_CHECKPOINT_PAGES}`);
      },
      onGone: () => {
        if (db.open) db.pragma(`wal_autocheckpoint = ${AUTO_CHECKPOINT_PAGES}`);
      },
    });
  }
  db.exec('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY)');
  db.transaction(() => {
    const applied = new Set(
      (db.prepare('SELECT version FROM schema_migrations').all() as Array<{ version: number }>).map((r) => r.version),
    );
    for (const migration of SQLITE_MIGRATIONS) {
      if (applied.has(migration.version)) continue;
      db.exec(migration.sql);
      db.prepare('INSERT INTO schema_migrations (version) VALUES (?)').run(migration.version);
    }
  }).immediate();

  const keyColumns = 'id, role, environments, label, created_at, revoked_at, relay_url, access';
  const regColumns =
    'environment_id, registration_id, security_profile, executor_public_key, api_key_id, created_at, epoch, relay_url';
  const stmt = {
    insertKey: db.prepare(
      `INSERT INTO api_keys (id, token_hash, role, environments, label, created_at, relay_url, access)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
    ),
    findKey: db.prepare(`SELECT ${keyColumns} FROM api_keys WHERE token_hash = ? AND revoked_at IS NULL`),
    listKeys: db.prepare(`SELECT ${keyColumns} FROM api_keys ORDER BY created_at, id`),
    revokeKey: db.prepare('UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL'),
    insertEnv: db.prepare(
      'INSERT INTO environments (id, created_at, owner_key_id) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING',
    ),
    envOwner: db.prepare('SELECT owner_key_id FROM environments WHERE id = ?').pluck(),
    nextEpoch: db
      .prepare(
        'UPDATE environments SET last_epoch = last_epoch + 1, owner_key_id = ? WHERE id = ? RETURNING last_epoch',
      )
      .pluck(),
    setOwner: db.prepare('UPDATE environments SET owner_key_id = ? WHERE id = ?'),
    activeExecutorKey: db
      .prepare("SELECT 1 FROM api_keys WHERE id = ? AND role = 'executor' AND revoked_at IS NULL")
      .pluck(),
    upsertReg: db.prepare(
      `INSERT INTO registrations (${regColumns}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (environment_id) DO UPDATE SET registration_id = excluded.registration_id,
         security_profile = excluded.security_profile, executor_public_key = excluded.executor_public_key,
         api_key_id = excluded.api_key_id, created_at = excluded.created_at, epoch = excluded.epoch,
         relay_url = excluded.relay_url`,
    ),
    currentReg: db.prepare(`SELECT ${regColumns} FROM registrations WHERE environment_id = ?`),
    regsOfKey: db.prepare('SELECT environment_id, registration_id FROM registrations WHERE api_key_id = ?'),
    revokeReg: db.prepare('DELETE FROM registrations WHERE environment_id = ? AND registration_id = ?'),
    recordRevoked: db.prepare(
      `INSERT INTO revoked_registrations (registration_id, environment_id, revoked_at) VALUES (?, ?, ?)
       ON CONFLICT (registration_id) DO NOTHING`,
    ),
    dropAuthsOf: db.prepare('DELETE FROM authorizations WHERE environment_id = ? AND registration_id = ?'),
    listRevoked: db.prepare(
      `SELECT environment_id, registration_id, revoked_at FROM revoked_registrations WHERE revoked_at >= ?
       ORDER BY revoked_at DESC, rowid DESC LIMIT ?`,
    ),
    registrationRevoked: db
      .prepare(
        `SELECT EXISTS (SELECT 1 FROM revoked_registrations WHERE environment_id = ?)
           AND NOT EXISTS (SELECT 1 FROM registrations WHERE environment_id = ?)`,
      )
      .pluck(),
    listEnvs: db.prepare(
      `SELECT e.id, e.created_at AS env_created_at, e.owner_key_id, r.* FROM environments e
       LEFT JOIN registrations r ON r.environment_id = e.id ORDER BY e.id`,
    ),
    insertAuth: db.prepare(`INSERT INTO authorizations (${AUTHORIZATION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`),
    // A consumed authorization is deleted (rather than marked used): the table holds only live ones, which
    // keeps its pages few and hot; rows with used_at set by older versions still never match.
    consumeAuth: db.prepare(
      `DELETE FROM authorizations WHERE token_hash = ? AND environment_id = ? AND registration_id = ?
       AND harness_public_key = ? AND used_at IS NULL AND expires_at > ?
       AND (minted_by_key_id IS NULL OR EXISTS (SELECT 1 FROM api_keys k
         WHERE k.id = authorizations.minted_by_key_id AND k.revoked_at IS NULL))
       RETURNING ${consumedReturning('authorizations')}`,
    ),
    consumeOwnedAuth: db.prepare(
      `DELETE FROM authorizations WHERE token_hash = ? AND environment_id = ? AND registration_id = ?
       AND harness_public_key = ? AND used_at IS NULL AND expires_at > ?
       AND EXISTS (SELECT 1 FROM registrations r WHERE r.environment_id = authorizations.environment_id
         AND r.registration_id = authorizations.registration_id AND r.api_key_id = ?)
       AND (minted_by_key_id IS NULL OR EXISTS (SELECT 1 FROM api_keys k
         WHERE k.id = authorizations.minted_by_key_id AND k.revoked_at IS NULL))
       RETURNING ${consumedReturning('authorizations')}`,
    ),
    pruneAuth: db.prepare('DELETE FROM authorizations WHERE expires_at < ?'),
    insertGrant: db.prepare(
      'INSERT INTO browser_grants (token_hash, environment_id, api_key_id, expires_at, share_access) VALUES (?, ?, ?, ?, ?)',
    ),
    consumeGrant: db.prepare(
      `DELETE FROM browser_grants WHERE token_hash = ? AND expires_at > ?
       AND EXISTS (SELECT 1 FROM api_keys k WHERE k.id = browser_grants.api_key_id AND k.revoked_at IS NULL)
       RETURNING environment_id, api_key_id, share_access`,
    ),
    insertSession: db.prepare(
      `INSERT INTO browser_sessions (token_hash, environment_id, api_key_id, expires_at, share_access)
       VALUES (?, ?, ?, ?, ?)`,
    ),
    findSession: db.prepare(
      `SELECT s.environment_id, s.api_key_id, s.expires_at, s.share_access FROM browser_sessions s
       JOIN api_keys k ON k.id = s.api_key_id AND k.revoked_at IS NULL
       WHERE s.token_hash = ? AND s.expires_at > ?`,
    ),
    pruneGrants: db.prepare('DELETE FROM browser_grants WHERE expires_at < ?'),
    pruneSessions: db.prepare('DELETE FROM browser_sessions WHERE expires_at < ?'),
    heartbeat: db.prepare(
      'INSERT INTO relay_nodes (url, last_seen) VALUES (?, ?) ON CONFLICT (url) DO UPDATE SET last_seen = excluded.last_seen',
    ),
    // Only an environment whose current registration sent its executor to this node (or names none).
    upsertLink: db.prepare(
      `INSERT INTO relay_links (environment_id, relay_url, last_seen)
       SELECT r.environment_id, ?, ? FROM registrations r
       WHERE r.environment_id = ? AND (r.relay_url IS NULL OR r.relay_url = ?)
       ON CONFLICT (environment_id) DO UPDATE SET relay_url = excluded.relay_url, last_seen = excluded.last_seen`,
    ),
    link: db.prepare(relayLinkSql('?')),
    nodes: db.prepare('SELECT url, last_seen FROM relay_nodes ORDER BY url'),
    dataVersion: db.prepare('PRAGMA data_version').pluck(),
  };

  // Read caches for the per-request lookups (API keys, current registrations, relay presence). They are exact:
  // this connection's own writes update or clear them, and `PRAGMA data_version` changes whenever another
  // connection (a `registry keys` CLI, another process) commits, which clears them all before the next read.
  const keys = new BoundedCache<string, ApiKeyRecord>(CACHE_ENTRIES);
  const links = new BoundedCache<string, RelayLinkRecord | null>(CACHE_ENTRIES);
  const registrations = new BoundedCache<string, RegistrationRecord | null>(CACHE_ENTRIES);
  let nodes: RelayNodeRecord[] | null = null;
  let seenVersion: unknown;
  const fresh = () => {
    const version = stmt.dataVersion.get();
    if (version !== seenVersion) {
      seenVersion = version;
      keys.clear();
      links.clear();
      registrations.clear();
      nodes = null;
    }
  };
  const putRegistration = db.transaction((r: NewRegistration): PutRegistrationResult => {
    // In the same transaction as the key's revocation would be: a registration never outlives its key.
    if (stmt.activeExecutorKey.get(r.apiKeyId) === undefined) return { ok: false, reason: 'key_revoked' };
    stmt.insertEnv.run(r.environmentId, r.createdAt, r.apiKeyId);
    const owner = stmt.envOwner.get(r.environmentId) as string | null;
    if (owner !== null && owner !== r.apiKeyId) return { ok: false, reason: 'environment_owned' };
    const epoch = Number(stmt.nextEpoch.get(r.apiKeyId, r.environmentId));
    stmt.upsertReg.run(
      r.environmentId,
      r.registrationId,
      r.securityProfile,
      r.executorPublicKey,
      r.apiKeyId,
      r.createdAt,
      epoch,
      r.relayUrl ?? null,
    );
    return { ok: true, epoch };
  });

  /** Drops a current registration, records its revocation and deletes its unused authorizations. */
  const revokeOne = (environmentId: string, registrationId: string, at: number): RevokedRegistrationRecord | null => {
    if (stmt.revokeReg.run(environmentId, registrationId).changes === 0) return null;
    stmt.recordRevoked.run(registrationId, environmentId, at);
    stmt.dropAuthsOf.run(environmentId, registrationId);
    return { environmentId, registrationId, revokedAt: at };
  };

  const revokeKey = db.transaction((id: string, at: number) => {
    if (stmt.revokeKey.run(at, id).changes === 0) return null;
    const rows = stmt.regsOfKey.all(id) as Array<{ environment_id: string; registration_id: string }>;
    const registrations = rows.flatMap((row) => revokeOne(row.environment_id, row.registration_id, at) ?? []);
    return { registrations };
  });

  const setOwner = db.transaction((environmentId: string, apiKeyId: string, at: number) => {
    if (stmt.activeExecutorKey.get(apiKeyId) === undefined) return false;
    stmt.insertEnv.run(environmentId, at, apiKeyId);
    stmt.setOwner.run(apiKeyId, environmentId);
    return true;
  });

  const exchangeGrant = db.transaction(
    (e: { grantHash: string; sessionHash: string; sessionExpiresAt: number; now: number }) => {
      const row = stmt.consumeGrant.get(e.grantHash, e.now) as
        | { environment_id: string; api_key_id: string; share_access: string | null }
        | undefined;
      if (!row) return null;
      const shareAccess = shareLinkAccess(row.share_access);
      stmt.insertSession.run(e.sessionHash, row.environment_id, row.api_key_id, e.sessionExpiresAt, shareAccess);
      return {
        environmentId: row.environment_id,
        apiKeyId: row.api_key_id,
        expiresAt: e.sessionExpiresAt,
        shareAccess,
      };
    },
  );

  const heartbeat = db.transaction((url: string, at: number, environmentIds: readonly string[]) => {
    stmt.heartbeat.run(url, at);
    for (const id of environmentIds) stmt.upsertLink.run(url, at, id, url);
  });

  /** An environment's row of `query`, converted, read through `cache` (which keeps a miss as null); a copy. */
  const cachedRow = <Row, T extends object>(
    cache: BoundedCache<string, T | null>,
    query: Database.Statement,
    convert: (row: Row) => T,
    environmentId: string,
  ): T | undefined => {
    fresh();
    let value = cache.get(environmentId);
    if (value === undefined) {
      const row = query.get(environmentId) as Row | undefined;
      value = row ? convert(row) : null;
      cache.set(environmentId, value);
    }
    return value ? { ...value } : undefined;
  };
  const currentRegistration = (environmentId: string): RegistrationRecord | undefined =>
    cachedRow(registrations, stmt.currentReg, toRegistration, environmentId);

  let batch: Array<{ resolve: () => void; reject: (err: unknown) => void }> | null = null;
  const failBatch = (waiting: NonNullable<typeof batch>, err: unknown) => {
    // Rolled back: what the caches read inside the transaction may never have existed.
    keys.clear();
    links.clear();
    registrations.clear();
    nodes = null;
    for (const w of waiting) w.reject(err);
  };
  const commit = () => {
    const waiting = batch;
    if (waiting === null) return;
    batch = null;
    openBatches.delete(commit);
    if (!db.inTransaction) return failBatch(waiting, new Error('the write transaction was rolled back'));
    try {
      db.exec('COMMIT');
    } catch (err) {
      if (db.inTransaction) db.exec('ROLLBACK');
      return failBatch(waiting, err);
    }
    for (const w of waiting) w.resolve();
  };
  const write = <T>(fn: () => T): Promise<T> => {
    if (batch === null) {
      flushOtherBatches();
      db.exec('BEGIN IMMEDIATE');
      batch = [];
      openBatches.add(commit);
      setImmediate(commit);
    }
    const waiting = batch;
    let result: T;
    try {
      result = fn();
    } catch (err) {
      // Most statement errors undo only the statement; some (disk full, I/O) roll the whole transaction back.
      if (!db.inTransaction && batch === waiting) {
        batch = null;
        openBatches.delete(commit);
        failBatch(waiting, err);
      }
      return Promise.reject(err);
    }
    return new Promise<T>((resolve, reject) => waiting.push({ resolve: () => resolve(result), reject }));
  };

  const store: RegistryStore = {
    engine: 'sqlite',
    async ping() {
      db.prepare('SELECT 1').get();
    },
    async close() {
      commit();
      await checkpointer?.stop();
      if (db.open) db.close();
    },
    async createApiKey(k: NewApiKey) {
      await write(() =>
        stmt.insertKey.run(
          k.id,
          k.tokenHash,
          k.role,
          k.environments,
          k.label,
          k.createdAt,
          k.relayUrl ?? null,
          k.access ?? 'full',
        ),
      );
    },
    async findApiKey(tokenHash) {
      fresh();
      const cached = keys.get(tokenHash);
      if (cached) return { ...cached };
      const row = stmt.findKey.get(tokenHash) as KeyRow | undefined;
      if (!row) return undefined; // unknown tokens are not cached: they cannot crowd out real keys
      const key = toKey(row);
      keys.set(tokenHash, key);
      return { ...key };
    },
    async listApiKeys() {
      return (stmt.listKeys.all() as KeyRow[]).map(toKey);
    },
    async revokeApiKey(id, at) {
      return write(() => {
        keys.clear();
        registrations.clear();
        return revokeKey(id, at);
      });
    },
    async putRegistration(r) {
      return write(() => {
        registrations.delete(r.environmentId);
        return putRegistration(r);
      });
    },
    async currentRegistration(environmentId) {
      return currentRegistration(environmentId);
    },
    async revokeRegistration(environmentId, registrationId, at) {
      return write(() => {
        registrations.delete(environmentId);
        return db.transaction(revokeOne)(environmentId, registrationId, at);
      });
    },
    async listRevokedRegistrations(since, limit) {
      return (stmt.listRevoked.all(since, limit) as RevokedRow[]).map(toRevoked);
    },
    async registrationRevoked(environmentId) {
      return Number(stmt.registrationRevoked.get(environmentId, environmentId)) === 1;
    },
    async setEnvironmentOwner(environmentId, apiKeyId, at) {
      return write(() => setOwner(environmentId, apiKeyId, at));
    },
    async listEnvironments() {
      return (stmt.listEnvs.all() as EnvironmentRow[]).map(toEnvironment);
    },
    async createAuthorization(a: NewAuthorization) {
      await write(() => stmt.insertAuth.run(...authorizationValues(a, a.registrationId)));
    },
    async createAuthorizationForCurrent(a) {
      return write(() => {
        const current = currentRegistration(a.environmentId);
        if (current) stmt.insertAuth.run(...authorizationValues(a, current.registrationId));
        return current;
      });
    },
    async consumeAuthorization(c: AuthorizationClaim) {
      const args = [c.tokenHash, c.environmentId, c.registrationId, c.harnessPublicKey, c.now] as const;
      return write(() => {
        const row = (
          c.apiKeyId === undefined ? stmt.consumeAuth.get(...args) : stmt.consumeOwnedAuth.get(...args, c.apiKeyId)
        ) as ConsumedRow | undefined;
        return row ? consumedFrom(row) : null;
      });
    },
    async pruneAuthorizations(before) {
      return write(() => stmt.pruneAuth.run(before).changes);
    },
    async createBrowserGrant(g) {
      await write(() =>
        stmt.insertGrant.run(g.tokenHash, g.environmentId, g.apiKeyId, g.expiresAt, g.shareAccess ?? null),
      );
    },
    async exchangeBrowserGrant(e) {
      return write(() => exchangeGrant(e));
    },
    async findBrowserSession(tokenHash, now) {
      const row = stmt.findSession.get(tokenHash, now) as SessionRow | undefined;
      return row && toBrowserSession(row);
    },
    async pruneBrowserGrants(before) {
      return write(() => stmt.pruneGrants.run(before).changes + stmt.pruneSessions.run(before).changes);
    },
    async heartbeatRelayNode(url, at, environmentIds = []) {
      await write(() => {
        nodes = null;
        links.clear();
        heartbeat(url, at, environmentIds);
      });
    },
    async relayLink(environmentId) {
      return cachedRow(links, stmt.link, toRelayLink, environmentId);
    },
    async liveRelayNodes(since) {
      fresh();
      nodes ??= (stmt.nodes.all() as Array<{ url: string; last_seen: number }>).map(
        (r): RelayNodeRecord => ({ url: r.url, lastSeen: Number(r.last_seen) }),
      );
      return nodes.filter((node) => node.lastSeen >= since).map((node) => ({ ...node }));
    },
  };
  connections.set(store, db);
  return store;
}
