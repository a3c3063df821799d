import pg from 'pg';
import { BoundedCache } from '../cache.js';
import { POSTGRES_MIGRATIONS } from './migrations.js';
import { CACHE_ENTRIES, toKey, toRegistration } from './sqlite.js';
import type { ApiKeyRecord, EnvironmentRecord, RegistryStore, RelayLinkRecord, RelayNodeRecord } from './types.js';

export interface PostgresStoreOptions {
  /** `postgres://…` connection string. */
  connectionString: string;
  /** Schema holding the registry's tables (created if missing); default `public`. */
  schema?: string;
  /** Pool size; default 10. */
  max?: number;
  /**
   * How long API keys and relay presence read from the database are reused; default 2 000 ms, 0 disables.
   * Writes through this store (revocations, heartbeats) take effect at once; writes by other replicas or by
   * `registry keys revoke` are seen within this bound.
   */
  cacheTtlMs?: number;
}

/** Reads cached for at most `ttlMs`; a fill that raced an invalidation (generation bump) is dropped. */
class TtlCache<V> {
  readonly #entries = new BoundedCache<string, { value: V; at: number }>(CACHE_ENTRIES);
  #generation = 0;

  constructor(readonly ttlMs: number) {}

  async get(key: string, load: () => Promise<V>): Promise<V> {
    const now = Date.now();
    const hit = this.#entries.get(key);
    if (hit && now - hit.at < this.ttlMs) return hit.value;
    const generation = this.#generation;
    const value = await load();
    if (this.ttlMs > 0 && generation === this.#generation) this.#entries.set(key, { value, at: now });
    return value;
  }

  clear(): void {
    this.#generation++;
    this.#entries.clear();
  }
}

const IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;
/** Arbitrary lock id serialising concurrent migrators (two replicas starting at once). */
const MIGRATION_LOCK = 0x7e7e_4e67;

/** PostgreSQL store (pg pool); migrations run under an advisory lock on open. */
export async function openPostgresStore(options: PostgresStoreOptions): Promise<RegistryStore> {
  const schema = options.schema ?? 'public';
  if (!IDENTIFIER.test(schema)) throw new Error(`invalid schema name: ${schema}`);
  const pool = new pg.Pool({
    connectionString: options.connectionString,
    max: options.max ?? 10,
    options: `-c search_path=${schema}`,
  });
  pool.on('error', () => {}); // idle-client errors surface on the next query instead of crashing
  const client = await pool.connect().catch(async (err: unknown) => {
    await pool.end();
    throw err;
  });
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
    await client.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
    await client.query('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY)');
    const { rows } = await client.query<{ version: number }>('SELECT version FROM schema_migrations');
    const applied = new Set(rows.map((r) => r.version));
    for (const migration of POSTGRES_MIGRATIONS) {
      if (applied.has(migration.version)) continue;
      await client.query(migration.sql);
      await client.query('INSERT INTO schema_migrations (version) VALUES ($1)', [migration.version]);
    }
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    client.release();
    await pool.end();
    throw err;
  }
  client.release();

  const keyColumns = 'id, role, environments, label, created_at, revoked_at';
  const regColumns = 'environment_id, registration_id, security_profile, executor_public_key, api_key_id, created_at';
  let closed = false;
  // The per-request queries below are named: pg prepares each once per pooled connection, sparing the server a
  // parse and plan per request.
  const ttlMs = options.cacheTtlMs ?? 2_000;
  const keys = new TtlCache<ApiKeyRecord | undefined>(ttlMs);
  const links = new TtlCache<RelayLinkRecord | undefined>(ttlMs);
  const nodes = new TtlCache<RelayNodeRecord[]>(ttlMs);

  return {
    engine: 'postgres',
    async ping() {
      await pool.query('SELECT 1');
    },
    async close() {
      if (closed) return;
      closed = true;
      await pool.end();
    },
    async createApiKey(k) {
      await pool.query(
        'INSERT INTO api_keys (id, token_hash, role, environments, label, created_at) VALUES ($1, $2, $3, $4, $5, $6)',
        [k.id, k.tokenHash, k.role, k.environments, k.label, k.createdAt],
      );
    },
    async findApiKey(tokenHash) {
      const key = await keys.get(tokenHash, async () => {
        const { rows } = await pool.query({
          name: 'registry_find_api_key',
          text: `SELECT ${keyColumns} FROM api_keys WHERE token_hash = $1 AND revoked_at IS NULL`,
          values: [tokenHash],
        });
        return rows[0] && toKey(rows[0]);
      });
      return key && { ...key };
    },
    async listApiKeys() {
      const { rows } = await pool.query(`SELECT ${keyColumns} FROM api_keys ORDER BY created_at, id`);
      return rows.map(toKey);
    },
    async revokeApiKey(id, at) {
      keys.clear();
      const result = await pool.query('UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL', [
        at,
        id,
      ]);
      keys.clear();
      return (result.rowCount ?? 0) > 0;
    },
    async putRegistration(r) {
      // One statement (CTE) keeps environment creation and replacement atomic without a pinned client.
      await pool.query(
        `WITH env AS (INSERT INTO environments (id, created_at) VALUES ($1, $6) ON CONFLICT (id) DO NOTHING)
         INSERT INTO registrations (${regColumns}) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (environment_id) DO UPDATE SET registration_id = excluded.registration_id,
           security_profile = excluded.security_profile, executor_public_key = excluded.executor_public_key,
           api_key_id = excluded.api_key_id, created_at = excluded.created_at`,
        [r.environmentId, r.registrationId, r.securityProfile, r.executorPublicKey, r.apiKeyId, r.createdAt],
      );
    },
    async currentRegistration(environmentId) {
      const { rows } = await pool.query({
        name: 'registry_current_registration',
        text: `SELECT ${regColumns} FROM registrations WHERE environment_id = $1`,
        values: [environmentId],
      });
      return rows[0] && toRegistration(rows[0]);
    },
    async revokeRegistration(environmentId, registrationId) {
      const result = await pool.query('DELETE FROM registrations WHERE environment_id = $1 AND registration_id = $2', [
        environmentId,
        registrationId,
      ]);
      return (result.rowCount ?? 0) > 0;
    },
    async listEnvironments() {
      const { rows } = await pool.query(
        `SELECT e.id, e.created_at AS env_created_at, r.* FROM environments e
         LEFT JOIN registrations r ON r.environment_id = e.id ORDER BY e.id`,
      );
      return rows.map(
        (row): EnvironmentRecord => ({
          environmentId: row.id,
          createdAt: Number(row.env_created_at),
          registration: row.registration_id === null ? null : toRegistration(row),
        }),
      );
    },
    async createAuthorization(a) {
      await pool.query({
        name: 'registry_create_authorization',
        text: `INSERT INTO authorizations (token_hash, environment_id, registration_id, harness_public_key, expires_at)
         VALUES ($1, $2, $3, $4, $5)`,
        values: [a.tokenHash, a.environmentId, a.registrationId, a.harnessPublicKey, a.expiresAt],
      });
    },
    async createAuthorizationForCurrent(a) {
      // One statement, one snapshot: the registration read is the one the authorization is created for.
      const { rows } = await pool.query({
        name: 'registry_create_authorization_for_current',
        text: `WITH r AS (SELECT ${regColumns} FROM registrations WHERE environment_id = $1),
          ins AS (INSERT INTO authorizations (token_hash, environment_id, registration_id, harness_public_key, expires_at)
            SELECT $2, environment_id, registration_id, $3, $4 FROM r)
          SELECT * FROM r`,
        values: [a.environmentId, a.tokenHash, a.harnessPublicKey, a.expiresAt],
      });
      return rows[0] && toRegistration(rows[0]);
    },
    async consumeAuthorization(c) {
      // A single UPDATE … WHERE used_at IS NULL: concurrent claimers serialise on the row lock and the
      // loser re-evaluates the predicate against the winner's committed row, so only one gets a row back.
      // A consumed authorization is deleted (rather than marked used), so the table holds only live ones; rows
      // with used_at set by older versions still never match.
      const values = [c.now, c.tokenHash, c.environmentId, c.registrationId, c.harnessPublicKey];
      const result = await pool.query(
        c.apiKeyId === undefined
          ? {
              name: 'registry_consume_authorization',
              text: `DELETE FROM authorizations WHERE token_hash = $2 AND environment_id = $3 AND registration_id = $4
                AND harness_public_key = $5 AND used_at IS NULL AND expires_at > $1 RETURNING token_hash`,
              values,
            }
          : {
              name: 'registry_consume_owned_authorization',
              text: `DELETE FROM authorizations a WHERE token_hash = $2 AND environment_id = $3 AND registration_id = $4
                AND harness_public_key = $5 AND used_at IS NULL AND expires_at > $1
                AND EXISTS (SELECT 1 FROM registrations r WHERE r.environment_id = a.environment_id
                  AND r.registration_id = a.registration_id AND r.api_key_id = $6)
                RETURNING token_hash`,
              values: [...values, c.apiKeyId],
            },
      );
      return (result.rowCount ?? 0) === 1;
    },
    async pruneAuthorizations(before) {
      const result = await pool.query('DELETE FROM authorizations WHERE expires_at < $1', [before]);
      return result.rowCount ?? 0;
    },
    async heartbeatRelayNode(url, at, environmentIds = []) {
      nodes.clear();
      links.clear();
      await pool.query(
        `WITH node AS (
           INSERT INTO relay_nodes (url, last_seen) VALUES ($1, $2)
           ON CONFLICT (url) DO UPDATE SET last_seen = excluded.last_seen)
         INSERT INTO relay_links (environment_id, relay_url, last_seen)
         SELECT DISTINCT id, $1, $2::bigint FROM unnest($3::text[]) AS id
         ON CONFLICT (environment_id) DO UPDATE SET relay_url = excluded.relay_url, last_seen = excluded.last_seen`,
        [url, at, environmentIds],
      );
      nodes.clear();
      links.clear();
    },
    async relayLink(environmentId) {
      const link = await links.get(environmentId, async () => {
        const { rows } = await pool.query<{ environment_id: string; relay_url: string; last_seen: string }>(
          'SELECT environment_id, relay_url, last_seen FROM relay_links WHERE environment_id = $1',
          [environmentId],
        );
        const row = rows[0];
        return row && { environmentId: row.environment_id, relayUrl: row.relay_url, lastSeen: Number(row.last_seen) };
      });
      return link && { ...link };
    },
    async liveRelayNodes(since) {
      const all = await nodes.get('', async () => {
        const { rows } = await pool.query<{ url: string; last_seen: string }>(
          'SELECT url, last_seen FROM relay_nodes ORDER BY url',
        );
        return rows.map((r) => ({ url: r.url, lastSeen: Number(r.last_seen) }));
      });
      return all.filter((node) => node.lastSeen >= since).map((node) => ({ ...node }));
    },
  };
}
