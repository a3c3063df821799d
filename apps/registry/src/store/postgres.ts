import pg from 'pg';
import { BoundedCache } from '../cache.js';
import { POSTGRES_MIGRATIONS } from './migrations.js';
import {
  AUTHORIZATION_COLUMNS,
  authorizationValues,
  CACHE_ENTRIES,
  type ConsumedRow,
  consumedFrom,
  consumedReturning,
  type EnvironmentRow,
  relayLinkSql,
  type SessionRow,
  toBrowserSession,
  toEnvironment,
  toKey,
  toRegistration,
  toRelayLink,
  toRevoked,
} from './rows.js';
import type { ApiKeyRecord, RegistryStore, RelayLinkRecord, RelayNodeRecord } from './types.js';

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

  const keyColumns = 'id, role, environments, label, created_at, revoked_at, relay_url, access';
  const regColumns =
    'environment_id, registration_id, security_profile, executor_public_key, api_key_id, created_at, epoch, relay_url';
  /** Runs `fn` in one transaction on one pooled client. */
  const transaction = async <T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const result = await fn(client);
      await client.query('COMMIT');
      return result;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      throw err;
    } finally {
      client.release();
    }
  };
  // Drops matching current registrations, records their revocation and deletes their unused authorizations.
  const revokeRegistrationsSql = (where: string) => `
    WITH r AS (DELETE FROM registrations WHERE ${where} RETURNING environment_id, registration_id),
      rec AS (INSERT INTO revoked_registrations (registration_id, environment_id, revoked_at)
        SELECT registration_id, environment_id, $1::bigint FROM r ON CONFLICT (registration_id) DO NOTHING),
      auth AS (DELETE FROM authorizations WHERE registration_id IN (SELECT registration_id FROM r))
    SELECT environment_id, registration_id, $1::bigint AS revoked_at FROM r`;
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
        `INSERT INTO api_keys (id, token_hash, role, environments, label, created_at, relay_url, access)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
        [k.id, k.tokenHash, k.role, k.environments, k.label, k.createdAt, k.relayUrl ?? null, k.access ?? 'full'],
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
      // Two statements in one transaction (READ COMMITTED: the second sees every registration committed before it).
      // A registration in flight holds a share lock on the key row (putRegistration), so either it commits first and
      // the DELETE below sees it, or it waits for this UPDATE and then finds the key revoked.
      const result = await transaction(async (client) => {
        const updated = await client.query('UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL', [
          at,
          id,
        ]);
        if ((updated.rowCount ?? 0) === 0) return null;
        const { rows } = await client.query(revokeRegistrationsSql('api_key_id = $2'), [at, id]);
        return { registrations: rows.map(toRevoked) };
      });
      keys.clear();
      return result;
    },
    async putRegistration(r) {
      // One statement (CTE) keeps the key check, the ownership check, the epoch and the replacement atomic without
      // a pinned client. The key row is share-locked: see revokeApiKey. The environment row's upsert serialises
      // concurrent registrations, so epochs are distinct and the first key to register owns it.
      const { rows } = await pool.query<{ key_ok: number; epoch: string | null }>(
        `WITH k AS (SELECT id FROM api_keys WHERE id = $5 AND role = 'executor' AND revoked_at IS NULL FOR SHARE),
         env AS (
           INSERT INTO environments (id, created_at, owner_key_id, last_epoch) SELECT $1, $6, id, 1 FROM k
           ON CONFLICT (id) DO UPDATE SET last_epoch = environments.last_epoch + 1, owner_key_id = excluded.owner_key_id
           WHERE environments.owner_key_id IS NULL OR environments.owner_key_id = excluded.owner_key_id
           RETURNING last_epoch),
         reg AS (
           INSERT INTO registrations (${regColumns}) SELECT $1, $2, $3, $4, $5, $6, last_epoch, $7 FROM env
           ON CONFLICT (environment_id) DO UPDATE SET registration_id = excluded.registration_id,
             security_profile = excluded.security_profile, executor_public_key = excluded.executor_public_key,
             api_key_id = excluded.api_key_id, created_at = excluded.created_at, epoch = excluded.epoch,
             relay_url = excluded.relay_url
           RETURNING epoch)
         SELECT (SELECT count(*) FROM k)::int AS key_ok, (SELECT epoch FROM reg) AS epoch`,
        [
          r.environmentId,
          r.registrationId,
          r.securityProfile,
          r.executorPublicKey,
          r.apiKeyId,
          r.createdAt,
          r.relayUrl ?? null,
        ],
      );
      const row = rows[0];
      if (!row || row.key_ok === 0) return { ok: false, reason: 'key_revoked' };
      if (row.epoch === null) return { ok: false, reason: 'environment_owned' };
      return { ok: true, epoch: Number(row.epoch) };
    },
    async currentRegistration(environmentId) {
      const { rows } = await pool.query({
        name: 'registry_current_registration',
        text: `SELECT ${regColumns} FROM registrations WHERE environment_id = $1`,
        values: [environmentId],
      });
      return rows[0] && toRegistration(rows[0]);
    },
    async revokeRegistration(environmentId, registrationId, at) {
      const { rows } = await pool.query(revokeRegistrationsSql('environment_id = $2 AND registration_id = $3'), [
        at,
        environmentId,
        registrationId,
      ]);
      return rows[0] ? toRevoked(rows[0]) : null;
    },
    async listRevokedRegistrations(since, limit) {
      const { rows } = await pool.query(
        `SELECT environment_id, registration_id, revoked_at FROM revoked_registrations WHERE revoked_at >= $1
         ORDER BY revoked_at DESC, registration_id LIMIT $2`,
        [since, limit],
      );
      return rows.map(toRevoked);
    },
    async registrationRevoked(environmentId) {
      const { rows } = await pool.query<{ revoked: boolean }>(
        `SELECT EXISTS (SELECT 1 FROM revoked_registrations WHERE environment_id = $1)
           AND NOT EXISTS (SELECT 1 FROM registrations WHERE environment_id = $1) AS revoked`,
        [environmentId],
      );
      return rows[0]?.revoked === true;
    },
    async setEnvironmentOwner(environmentId, apiKeyId, at) {
      const result = await pool.query(
        `WITH k AS (SELECT id FROM api_keys WHERE id = $2 AND role = 'executor' AND revoked_at IS NULL)
         INSERT INTO environments (id, created_at, owner_key_id) SELECT $1, $3, id FROM k
         ON CONFLICT (id) DO UPDATE SET owner_key_id = excluded.owner_key_id RETURNING id`,
        [environmentId, apiKeyId, at],
      );
      return (result.rowCount ?? 0) > 0;
    },
    async listEnvironments() {
      const { rows } = await pool.query(
        `SELECT e.id, e.created_at AS env_created_at, e.owner_key_id, r.* FROM environments e
         LEFT JOIN registrations r ON r.environment_id = e.id ORDER BY e.id`,
      );
      return (rows as EnvironmentRow[]).map(toEnvironment);
    },
    async createAuthorization(a) {
      await pool.query({
        name: 'registry_create_authorization',
        text: `INSERT INTO authorizations (${AUTHORIZATION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
        values: [...authorizationValues(a, a.registrationId)],
      });
    },
    async createAuthorizationForCurrent(a) {
      // One statement, one snapshot: the registration read is the one the authorization is created for.
      const { rows } = await pool.query({
        name: 'registry_create_authorization_for_current',
        text: `WITH r AS (SELECT ${regColumns} FROM registrations WHERE environment_id = $1),
          ins AS (INSERT INTO authorizations (${AUTHORIZATION_COLUMNS})
            SELECT $2, environment_id, registration_id, $3, $4, $5, $6, $7, $8 FROM r)
          SELECT * FROM r`,
        values: [
          a.environmentId,
          a.tokenHash,
          a.harnessPublicKey,
          a.expiresAt,
          a.connectRequestId ?? null,
          a.mintedByKeyId ?? null,
          a.linkSession?.id ?? null,
          a.linkSession?.access ?? null,
        ],
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
              text: `DELETE FROM authorizations a WHERE token_hash = $2 AND environment_id = $3 AND registration_id = $4
                AND harness_public_key = $5 AND used_at IS NULL AND expires_at > $1
                AND (a.minted_by_key_id IS NULL OR EXISTS (SELECT 1 FROM api_keys k
                  WHERE k.id = a.minted_by_key_id AND k.revoked_at IS NULL))
                RETURNING ${consumedReturning('a')}`,
              values,
            }
          : {
              name: 'registry_consume_owned_authorization',
              text: `DELETE FROM authorizations a WHERE token_hash = $2 AND environment_id = $3 AND registration_id = $4
                AND harness_public_key = $5 AND used_at IS NULL AND expires_at > $1
                AND EXISTS (SELECT 1 FROM registrations r WHERE r.environment_id = a.environment_id
                  AND r.registration_id = a.registration_id AND r.api_key_id = $6)
                AND (a.minted_by_key_id IS NULL OR EXISTS (SELECT 1 FROM api_keys k
                  WHERE k.id = a.minted_by_key_id AND k.revoked_at IS NULL))
                RETURNING ${consumedReturning('a')}`,
              values: [...values, c.apiKeyId],
            },
      );
      const row = result.rows[0] as ConsumedRow | undefined;
      return result.rowCount === 1 && row ? consumedFrom(row) : null;
    },
    async pruneAuthorizations(before) {
      const result = await pool.query('DELETE FROM authorizations WHERE expires_at < $1', [before]);
      return result.rowCount ?? 0;
    },
    async createBrowserGrant(g) {
      await pool.query(
        `INSERT INTO browser_grants (token_hash, environment_id, api_key_id, expires_at, share_access)
         VALUES ($1, $2, $3, $4, $5)`,
        [g.tokenHash, g.environmentId, g.apiKeyId, g.expiresAt, g.shareAccess ?? null],
      );
    },
    async exchangeBrowserGrant(e) {
      // One statement: the DELETE … RETURNING takes the grant's row lock, so of concurrent exchanges only one gets
      // the row (the others re-check the predicate against its committed delete and get none).
      const { rows } = await pool.query<SessionRow>(
        `WITH g AS (DELETE FROM browser_grants b WHERE token_hash = $1 AND expires_at > $2
            AND EXISTS (SELECT 1 FROM api_keys k WHERE k.id = b.api_key_id AND k.revoked_at IS NULL)
            RETURNING environment_id, api_key_id, share_access)
         INSERT INTO browser_sessions (token_hash, environment_id, api_key_id, expires_at, share_access)
           SELECT $3, environment_id, api_key_id, $4::bigint, share_access FROM g
           RETURNING environment_id, api_key_id, expires_at, share_access`,
        [e.grantHash, e.now, e.sessionHash, e.sessionExpiresAt],
      );
      const row = rows[0];
      return row ? toBrowserSession(row) : null;
    },
    async findBrowserSession(tokenHash, now) {
      const { rows } = await pool.query({
        name: 'registry_find_browser_session',
        text: `SELECT s.environment_id, s.api_key_id, s.expires_at, s.share_access FROM browser_sessions s
          JOIN api_keys k ON k.id = s.api_key_id AND k.revoked_at IS NULL
          WHERE s.token_hash = $1 AND s.expires_at > $2`,
        values: [tokenHash, now],
      });
      const row = rows[0] as SessionRow | undefined;
      return row && toBrowserSession(row);
    },
    async pruneBrowserGrants(before) {
      const grants = await pool.query('DELETE FROM browser_grants WHERE expires_at < $1', [before]);
      const sessions = await pool.query('DELETE FROM browser_sessions WHERE expires_at < $1', [before]);
      return (grants.rowCount ?? 0) + (sessions.rowCount ?? 0);
    },
    async heartbeatRelayNode(url, at, environmentIds = []) {
      nodes.clear();
      links.clear();
      await pool.query(
        `WITH node AS (
           INSERT INTO relay_nodes (url, last_seen) VALUES ($1, $2)
           ON CONFLICT (url) DO UPDATE SET last_seen = excluded.last_seen)
         INSERT INTO relay_links (environment_id, relay_url, last_seen)
         SELECT DISTINCT r.environment_id, $1, $2::bigint FROM registrations r
         WHERE r.environment_id = ANY($3::text[]) AND (r.relay_url IS NULL OR r.relay_url = $1)
         ON CONFLICT (environment_id) DO UPDATE SET relay_url = excluded.relay_url, last_seen = excluded.last_seen`,
        [url, at, environmentIds],
      );
      nodes.clear();
      links.clear();
    },
    async relayLink(environmentId) {
      const link = await links.get(environmentId, async () => {
        const { rows } = await pool.query({
          name: 'registry_relay_link',
          text: relayLinkSql('$1'),
          values: [environmentId],
        });
        const row = rows[0];
        return row && toRelayLink(row);
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
