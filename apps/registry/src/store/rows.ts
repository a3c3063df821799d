/**
 * What both engines read back, and how each row becomes a record: the column names are the same in SQLite and
 * PostgreSQL (migrations.ts), so one mapper serves both. PostgreSQL returns BIGINT columns as strings, hence Number().
 */
import type {
  ApiKeyRecord,
  BrowserSessionRecord,
  ConsumedAuthorization,
  EnvironmentRecord,
  NewAuthorization,
  RegistrationRecord,
  RelayLinkRecord,
  RevokedRegistrationRecord,
  Role,
  ShareLinkAccess,
} from './types.js';

/** Bound on each read cache (API keys, registrations, relay links); past it the oldest entries go. */
export const CACHE_ENTRIES = 10_000;

export interface KeyRow {
  id: string;
  role: string;
  environments: string;
  label: string;
  created_at: number;
  revoked_at: number | null;
  relay_url: string | null;
  access: string;
}
export interface RegistrationRow {
  environment_id: string;
  registration_id: string;
  security_profile: string;
  executor_public_key: string;
  api_key_id: string;
  created_at: number;
  epoch: number;
  relay_url: string | null;
}
export interface RevokedRow {
  environment_id: string;
  registration_id: string;
  revoked_at: number;
}

export const toKey = (row: KeyRow): ApiKeyRecord => ({
  id: row.id,
  role: row.role as Role,
  environments: row.environments,
  label: row.label,
  createdAt: Number(row.created_at),
  revokedAt: row.revoked_at === null ? null : Number(row.revoked_at),
  relayUrl: row.relay_url ?? null,
  access: row.access === 'view' ? 'view' : 'full',
});

/** What consuming an authorization returns (both engines). */
export interface ConsumedRow {
  connect_request_id: string | null;
  minted_by_key_id: string | null;
  minted_by_role: string | null;
  minted_by_access: string | null;
  link_session: string | null;
  share_access: string | null;
}

export const consumedFrom = (row: ConsumedRow): ConsumedAuthorization => ({
  connectRequestId: row.connect_request_id,
  mintedByKeyId: row.minted_by_key_id,
  mintedByRole: row.minted_by_role as Role | null,
  mintedByAccess: row.minted_by_access === null ? null : row.minted_by_access === 'view' ? 'view' : 'full',
  linkSession:
    row.link_session === null ? null : { id: row.link_session, access: shareLinkAccess(row.share_access) ?? 'view' },
});

/** A stored share-link access: `control` or `view`; anything else (NULL) is none. */
export const shareLinkAccess = (value: string | null | undefined): ShareLinkAccess | null =>
  value === 'control' ? 'control' : value === 'view' ? 'view' : null;

/**
 * What a consumed authorization's RETURNING lists (both engines), the deleted row named `table` (SQLite's
 * RETURNING cannot name an alias; PostgreSQL's statements alias the table `a`).
 */
export const consumedReturning = (table: string) => `connect_request_id, minted_by_key_id, link_session, share_access,
  (SELECT k.role FROM api_keys k WHERE k.id = ${table}.minted_by_key_id) AS minted_by_role,
  (SELECT k.access FROM api_keys k WHERE k.id = ${table}.minted_by_key_id) AS minted_by_access`;

export const toRegistration = (row: RegistrationRow): RegistrationRecord => ({
  environmentId: row.environment_id,
  registrationId: row.registration_id,
  securityProfile: row.security_profile,
  executorPublicKey: row.executor_public_key,
  apiKeyId: row.api_key_id,
  createdAt: Number(row.created_at),
  epoch: Number(row.epoch),
  relayUrl: row.relay_url ?? null,
});

export const toRevoked = (row: RevokedRow): RevokedRegistrationRecord => ({
  environmentId: row.environment_id,
  registrationId: row.registration_id,
  revokedAt: Number(row.revoked_at),
});

export interface RelayLinkRow {
  environment_id: string;
  relay_url: string;
  last_seen: number | string;
  node_last_seen: number | string;
}

/**
 * An environment's link and its node's last heartbeat, in one statement (`param` is the engine's placeholder for
 * the environment id): a heartbeat writes both rows at once, so a single read sees them agree or both moved.
 */
export const relayLinkSql = (param: string) => `
  SELECT l.environment_id, l.relay_url, l.last_seen, COALESCE(n.last_seen, l.last_seen) AS node_last_seen
  FROM relay_links l LEFT JOIN relay_nodes n ON n.url = l.relay_url
  WHERE l.environment_id = ${param}`;

export const toRelayLink = (row: RelayLinkRow): RelayLinkRecord => ({
  environmentId: row.environment_id,
  relayUrl: row.relay_url,
  lastSeen: Number(row.last_seen),
  nodeLastSeen: Number(row.node_last_seen),
});

/** A row of the environments listing: the environment's columns and, LEFT JOINed, its registration's (or NULLs). */
export type EnvironmentRow = Omit<RegistrationRow, 'registration_id'> & {
  id: string;
  env_created_at: number | string;
  owner_key_id: string | null;
  registration_id: string | null;
};

export const toEnvironment = (row: EnvironmentRow): EnvironmentRecord => ({
  environmentId: row.id,
  createdAt: Number(row.env_created_at),
  ownerKeyId: row.owner_key_id,
  registration: row.registration_id === null ? null : toRegistration(row as RegistrationRow),
});

/** The values of an authorization's INSERT, in its column order (both engines), for `registrationId`. */
export const authorizationValues = (a: Omit<NewAuthorization, 'registrationId'>, registrationId: string) =>
  [
    a.tokenHash,
    a.environmentId,
    registrationId,
    a.harnessPublicKey,
    a.expiresAt,
    a.connectRequestId ?? null,
    a.mintedByKeyId ?? null,
    a.linkSession?.id ?? null,
    a.linkSession?.access ?? null,
  ] as const;

/** The columns of an authorization's INSERT, in authorizationValues' order (both engines). */
export const AUTHORIZATION_COLUMNS = `token_hash, environment_id, registration_id, harness_public_key, expires_at,
  connect_request_id, minted_by_key_id, link_session, share_access`;

/** A browser session as both engines read it. */
export interface SessionRow {
  environment_id: string;
  api_key_id: string;
  expires_at: number | string;
  share_access: string | null;
}

export const toBrowserSession = (row: SessionRow): BrowserSessionRecord => ({
  environmentId: row.environment_id,
  apiKeyId: row.api_key_id,
  expiresAt: Number(row.expires_at),
  shareAccess: shareLinkAccess(row.share_access),
});
