import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { BoundedCache } from '../cache.js';
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

/** Bound on each read cache (API keys, relay links); past it the oldest entries go. */
export const CACHE_ENTRIES = 10_000;

/** SQLite store (better-sqlite3, WAL). `path` may be `:memory:`. */
export function openSqliteStore(path: string): RegistryStore {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  // WAL + NORMAL: no corruption on power loss, only the last commits may be lost; FULL fsyncs every commit.
  db.pragma('synchronous = NORMAL');
  db.pragma('busy_timeout = 5000');
  db.pragma('foreign_keys = ON');
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

  // Read caches for the per-request lookups (API keys, relay presence). They are exact: this connection's own
  // writes update or clear them, and `PRAGMA data_version` changes whenever another connection (a `registry keys`
  // CLI, another process) commits, which clears them all before the next read.
  const keys = new BoundedCache<string, ApiKeyRecord>(CACHE_ENTRIES);
  const links = new BoundedCache<string, RelayLinkRecord | null>(CACHE_ENTRIES);
  let nodes: RelayNodeRecord[] | null = null;
  let seenVersion: unknown;
  const fresh = () => {
    const version = stmt.dataVersion.get();
    if (version !== seenVersion) {
      seenVersion = version;
      keys.clear();
      links.clear();
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

  return {
    engine: 'sqlite',
    async ping() {
      db.prepare('SELECT 1').get();
    },
    async close() {
      if (db.open) db.close();
    },
    async createApiKey(k: NewApiKey) {
      stmt.insertKey.run(k.id, k.tokenHash, k.role, k.environments, k.label, k.createdAt);
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
      keys.clear();
      return stmt.revokeKey.run(at, id).changes > 0;
    },
    async putRegistration(r) {
      putRegistration(r);
    },
    async currentRegistration(environmentId) {
      const row = stmt.currentReg.get(environmentId) as RegistrationRow | undefined;
      return row && toRegistration(row);
    },
    async revokeRegistration(environmentId, registrationId) {
      return stmt.revokeReg.run(environmentId, registrationId).changes > 0;
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
      stmt.insertAuth.run(a.tokenHash, a.environmentId, a.registrationId, a.harnessPublicKey, a.expiresAt);
    },
    async consumeAuthorization(c: AuthorizationClaim) {
      const row = stmt.consumeAuth.get(c.tokenHash, c.environmentId, c.registrationId, c.harnessPublicKey, c.now);
      return row !== undefined;
    },
    async pruneAuthorizations(before) {
      return stmt.pruneAuth.run(before).changes;
    },
    async heartbeatRelayNode(url, at, environmentIds = []) {
      nodes = null;
      links.clear();
      heartbeat(url, at, environmentIds);
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
