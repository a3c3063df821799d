import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { BoundedCache } from '../cache.js';
import { type Checkpointer, startCheckpointer } from './checkpointer.js';
import { SQLITE_MIGRATIONS } from './migrations.js';
import type {
  ApiKeyRecord,
  AuthorizationClaim,
  EnvironmentRecord,
  NewApiKey,
  NewAuthorization,
  RegistrationRecord,
  RegistryStore,
  RelayLinkRecord,
  RelayNodeRecord,
  Role,
} from './types.js';

interface KeyRow {
  id: string;
  role: string;
  environments: string;
  label: string;
  created_at: number;
  revoked_at: number | null;
}
interface RegistrationRow {
  environment_id: string;
  registration_id: string;
  security_profile: string;
  executor_public_key: string;
  api_key_id: string;
  created_at: number;
}

export const toKey = (row: KeyRow): ApiKeyRecord => ({
  id: row.id,
  role: row.role as Role,
  environments: row.environments,
  label: row.label,
  createdAt: Number(row.created_at),
  revokedAt: row.revoked_at === null ? null : Number(row.revoked_at),
});

export const toRegistration = (row: RegistrationRow): RegistrationRecord => ({
  environmentId: row.environment_id,
  registrationId: row.registration_id,
  securityProfile: row.security_profile,
  executorPublicKey: row.executor_public_key,
  apiKeyId: row.api_key_id,
  createdAt: Number(row.created_at),
});

/** Bound on each read cache (API keys, registrations, relay links); past it the oldest entries go. */
export const CACHE_ENTRIES = 10_000;

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
  // WAL + NORMAL: no corruption on power loss, only the last commits may be lost; FULL fsyncs every commit.
  db.pragma('synchronous = NORMAL');
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

  const keyColumns = 'id, role, environments, label, created_at, revoked_at';
  const regColumns = 'environment_id, registration_id, security_profile, executor_public_key, api_key_id, created_at';
  const stmt = {
    insertKey: db.prepare(
      'INSERT INTO api_keys (id, token_hash, role, environments, label, created_at) VALUES (?, ?, ?, ?, ?, ?)',
    ),
    findKey: db.prepare(`SELECT ${keyColumns} FROM api_keys WHERE token_hash = ? AND revoked_at IS NULL`),
    listKeys: db.prepare(`SELECT ${keyColumns} FROM api_keys ORDER BY created_at, id`),
    revokeKey: db.prepare('UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL'),
    insertEnv: db.prepare('INSERT INTO environments (id, created_at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING'),
    upsertReg: db.prepare(
      `INSERT INTO registrations (${regColumns}) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT (environment_id) DO UPDATE SET registration_id = excluded.registration_id,
         security_profile = excluded.security_profile, executor_public_key = excluded.executor_public_key,
         api_key_id = excluded.api_key_id, created_at = excluded.created_at`,
    ),
    currentReg: db.prepare(`SELECT ${regColumns} FROM registrations WHERE environment_id = ?`),
    revokeReg: db.prepare('DELETE FROM registrations WHERE environment_id = ? AND registration_id = ?'),
    listEnvs: db.prepare(
      `SELECT e.id, e.created_at AS env_created_at, r.* FROM environments e
       LEFT JOIN registrations r ON r.environment_id = e.id ORDER BY e.id`,
    ),
    insertAuth: db.prepare(
      `INSERT INTO authorizations (token_hash, environment_id, registration_id, harness_public_key, expires_at)
       VALUES (?, ?, ?, ?, ?)`,
    ),
    // A consumed authorization is deleted (rather than marked used): the table holds only live ones, which
    // keeps its pages few and hot; rows with used_at set by older versions still never match.
    consumeAuth: db.prepare(
      `DELETE FROM authorizations WHERE token_hash = ? AND environment_id = ? AND registration_id = ?
       AND harness_public_key = ? AND used_at IS NULL AND expires_at > ? RETURNING token_hash`,
    ),
    consumeOwnedAuth: db.prepare(
      `DELETE FROM authorizations WHERE token_hash = ? AND environment_id = ? AND registration_id = ?
       AND harness_public_key = ? AND used_at IS NULL AND expires_at > ?
       AND EXISTS (SELECT 1 FROM registrations r WHERE r.environment_id = authorizations.environment_id
         AND r.registration_id = authorizations.registration_id AND r.api_key_id = ?)
       RETURNING token_hash`,
    ),
    pruneAuth: db.prepare('DELETE FROM authorizations WHERE expires_at < ?'),
    heartbeat: db.prepare(
      'INSERT INTO relay_nodes (url, last_seen) VALUES (?, ?) ON CONFLICT (url) DO UPDATE SET last_seen = excluded.last_seen',
    ),
    upsertLink: db.prepare(
      `INSERT INTO relay_links (environment_id, relay_url, last_seen) VALUES (?, ?, ?)
       ON CONFLICT (environment_id) DO UPDATE SET relay_url = excluded.relay_url, last_seen = excluded.last_seen`,
    ),
    link: db.prepare('SELECT environment_id, relay_url, last_seen FROM relay_links WHERE environment_id = ?'),
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
  const putRegistration = db.transaction((r: RegistrationRecord) => {
    stmt.insertEnv.run(r.environmentId, r.createdAt);
    stmt.upsertReg.run(
      r.environmentId,
      r.registrationId,
      r.securityProfile,
      r.executorPublicKey,
      r.apiKeyId,
      r.createdAt,
    );
  });

  const heartbeat = db.transaction((url: string, at: number, environmentIds: readonly string[]) => {
    stmt.heartbeat.run(url, at);
    for (const id of environmentIds) stmt.upsertLink.run(id, url, at);
  });

  const currentRegistration = (environmentId: string): RegistrationRecord | undefined => {
    fresh();
    let registration = registrations.get(environmentId);
    if (registration === undefined) {
      const row = stmt.currentReg.get(environmentId) as RegistrationRow | undefined;
      registration = row ? toRegistration(row) : null;
      registrations.set(environmentId, registration);
    }
    return registration ? { ...registration } : undefined;
  };

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

  return {
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
      await write(() => stmt.insertKey.run(k.id, k.tokenHash, k.role, k.environments, k.label, k.createdAt));
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
        return stmt.revokeKey.run(at, id).changes > 0;
      });
    },
    async putRegistration(r) {
      await write(() => {
        registrations.delete(r.environmentId);
        putRegistration(r);
      });
    },
    async currentRegistration(environmentId) {
      return currentRegistration(environmentId);
    },
    async revokeRegistration(environmentId, registrationId) {
      return write(() => {
        registrations.delete(environmentId);
        return stmt.revokeReg.run(environmentId, registrationId).changes > 0;
      });
    },
    async listEnvironments() {
      const rows = stmt.listEnvs.all() as Array<
        RegistrationRow & { id: string; env_created_at: number; registration_id: string | null }
      >;
      return rows.map(
        (row): EnvironmentRecord => ({
          environmentId: row.id,
          createdAt: Number(row.env_created_at),
          registration: row.registration_id === null ? null : toRegistration(row),
        }),
      );
    },
    async createAuthorization(a: NewAuthorization) {
      await write(() =>
        stmt.insertAuth.run(a.tokenHash, a.environmentId, a.registrationId, a.harnessPublicKey, a.expiresAt),
      );
    },
    async createAuthorizationForCurrent(a) {
      return write(() => {
        const current = currentRegistration(a.environmentId);
        if (current) {
          stmt.insertAuth.run(a.tokenHash, a.environmentId, current.registrationId, a.harnessPublicKey, a.expiresAt);
        }
        return current;
      });
    },
    async consumeAuthorization(c: AuthorizationClaim) {
      const args = [c.tokenHash, c.environmentId, c.registrationId, c.harnessPublicKey, c.now] as const;
      return write(
        () =>
          (c.apiKeyId === undefined
            ? stmt.consumeAuth.get(...args)
            : stmt.consumeOwnedAuth.get(...args, c.apiKeyId)) !== undefined,
      );
    },
    async pruneAuthorizations(before) {
      return write(() => stmt.pruneAuth.run(before).changes);
    },
    async heartbeatRelayNode(url, at, environmentIds = []) {
      await write(() => {
        nodes = null;
        links.clear();
        heartbeat(url, at, environmentIds);
      });
    },
    async relayLink(environmentId) {
      fresh();
      let link = links.get(environmentId);
      if (link === undefined) {
        const row = stmt.link.get(environmentId) as
          | { environment_id: string; relay_url: string; last_seen: number }
          | undefined;
        link = row
          ? { environmentId: row.environment_id, relayUrl: row.relay_url, lastSeen: Number(row.last_seen) }
          : null;
        links.set(environmentId, link);
      }
      return link ? { ...link } : undefined;
    },
    async liveRelayNodes(since) {
      fresh();
      nodes ??= (stmt.nodes.all() as Array<{ url: string; last_seen: number }>).map(
        (r): RelayNodeRecord => ({ url: r.url, lastSeen: Number(r.last_seen) }),
      );
      return nodes.filter((node) => node.lastSeen >= since).map((node) => ({ ...node }));
    },
  };
}
