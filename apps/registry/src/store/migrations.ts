/**
 * Schema migrations, applied in order on open; `schema_migrations` records the applied versions.
 * The two dialects differ only in types (SQLite INTEGER vs PostgreSQL BIGINT/BOOLEAN-free timestamps).
 */
export interface Migration {
  version: number;
  sql: string;
}

const common = (int: string): Migration[] => [
  {
    version: 1,
    sql: `
CREATE TABLE api_keys (
  id TEXT PRIMARY KEY,
  token_hash TEXT NOT NULL UNIQUE,
  role TEXT NOT NULL CHECK (role IN ('executor', 'harness', 'admin')),
  environments TEXT NOT NULL,
  label TEXT NOT NULL,
  created_at ${int} NOT NULL,
  revoked_at ${int}
);
CREATE TABLE environments (
  id TEXT PRIMARY KEY,
  created_at ${int} NOT NULL
);
CREATE TABLE registrations (
  environment_id TEXT PRIMARY KEY REFERENCES environments(id),
  registration_id TEXT NOT NULL UNIQUE,
  security_profile TEXT NOT NULL,
  executor_public_key TEXT NOT NULL,
  api_key_id TEXT NOT NULL,
  created_at ${int} NOT NULL
);
CREATE TABLE authorizations (
  token_hash TEXT PRIMARY KEY,
  environment_id TEXT NOT NULL,
  registration_id TEXT NOT NULL,
  harness_public_key TEXT NOT NULL,
  expires_at ${int} NOT NULL,
  used_at ${int}
);
CREATE INDEX authorizations_expires_at ON authorizations (expires_at);
CREATE TABLE relay_nodes (
  url TEXT PRIMARY KEY,
  last_seen ${int} NOT NULL
);
`,
  },
  {
    version: 2,
    sql: `
CREATE TABLE relay_links (
  environment_id TEXT PRIMARY KEY,
  relay_url TEXT NOT NULL,
  last_seen ${int} NOT NULL
);
`,
  },
];

/**
 * Version 3 (issue 16): environment ownership and registration epochs, the revocation record, and the `relay` role
 * with its node URL. Only the widening of the role CHECK differs: SQLite cannot alter a constraint, so it rebuilds
 * the (small) api_keys table.
 */
const ownershipAndRevocations = (int: string): string => `
ALTER TABLE environments ADD COLUMN owner_key_id TEXT;
ALTER TABLE environments ADD COLUMN last_epoch ${int} NOT NULL DEFAULT 0;
ALTER TABLE registrations ADD COLUMN epoch ${int} NOT NULL DEFAULT 0;
UPDATE environments SET owner_key_id =
  (SELECT r.api_key_id FROM registrations r WHERE r.environment_id = environments.id);
CREATE INDEX registrations_api_key_id ON registrations (api_key_id);
CREATE TABLE revoked_registrations (
  registration_id TEXT PRIMARY KEY,
  environment_id TEXT NOT NULL,
  revoked_at ${int} NOT NULL
);
CREATE INDEX revoked_registrations_revoked_at ON revoked_registrations (revoked_at);
CREATE INDEX revoked_registrations_environment_id ON revoked_registrations (environment_id);
`;

/**
 * Version 4: the relay node each registration was sent to. The registry routes harnesses to the node the
 * environment's executor was told to dial (and reports linked), not to the node a hash would pick now: a node
 * that joins must not pull harnesses away from where their executor is.
 */
const REGISTRATION_RELAY: Migration = {
  version: 4,
  sql: 'ALTER TABLE registrations ADD COLUMN relay_url TEXT;',
};

/**
 * The `x-request-id` of the `/connect` that issued an authorization, so that the executor's `/validate`, which
 * consumes it, can be logged with the same id (a harness's connect followed through to the executor).
 */
const AUTHORIZATION_REQUEST_ID: Migration = {
  version: 5,
  sql: 'ALTER TABLE authorizations ADD COLUMN connect_request_id TEXT;',
};

/**
 * Version 6 (issue 21): browser grants and sessions. A grant (minted with a harness key for one environment) is
 * exchanged once for a session, which acts as that key on that one environment's /connect. Only SHA-256 hashes of
 * either token are stored; a consumed grant is deleted.
 */
const browserGrants = (int: string): Migration => ({
  version: 6,
  sql: `
CREATE TABLE browser_grants (
  token_hash TEXT PRIMARY KEY,
  environment_id TEXT NOT NULL,
  api_key_id TEXT NOT NULL,
  expires_at ${int} NOT NULL
);
CREATE INDEX browser_grants_expires_at ON browser_grants (expires_at);
CREATE TABLE browser_sessions (
  token_hash TEXT PRIMARY KEY,
  environment_id TEXT NOT NULL,
  api_key_id TEXT NOT NULL,
  expires_at ${int} NOT NULL
);
CREATE INDEX browser_sessions_expires_at ON browser_sessions (expires_at);
`,
});

/**
 * Version 7 (issue 33): the API key that minted each authorization at /connect, so that /validate refuses one whose
 * key was revoked since. Rows from before stay NULL and are judged as before (they expire within a minute).
 */
const AUTHORIZATION_MINTED_BY: Migration = {
  version: 7,
  sql: 'ALTER TABLE authorizations ADD COLUMN minted_by_key_id TEXT;',
};

/**
 * Version 8 (issue 37): a harness key may be view-only (`keys create --role harness --access view`): the harnesses it
 * connects may watch processes shared with them and do nothing else. Existing keys keep full access.
 */
const KEY_ACCESS: Migration = {
  version: 8,
  sql: "ALTER TABLE api_keys ADD COLUMN access TEXT NOT NULL DEFAULT 'full' CHECK (access IN ('full', 'view'));",
};

/**
 * Version 9 (issue 37): share links. A browser grant printed by `harness share` carries the most its session may do
 * (`view` or `control`): that session reaches only processes shared with it, by their share tokens, and the
 * authorizations it mints at /connect name it (an id derived from its token's hash) so that /validate tells the
 * executor. NULL everywhere else: sign-in grants and sessions keep the key's access.
 */
const SHARE_LINKS: Migration = {
  version: 9,
  sql: `
ALTER TABLE browser_grants ADD COLUMN share_access TEXT CHECK (share_access IN ('view', 'control'));
ALTER TABLE browser_sessions ADD COLUMN share_access TEXT CHECK (share_access IN ('view', 'control'));
ALTER TABLE authorizations ADD COLUMN link_session TEXT;
ALTER TABLE authorizations ADD COLUMN share_access TEXT CHECK (share_access IN ('view', 'control'));
`,
};

const ROLE_CHECK = "CHECK (role IN ('executor', 'harness', 'admin', 'relay'))";

export const SQLITE_MIGRATIONS: Migration[] = [
  ...common('INTEGER'),
  {
    version: 3,
    sql: `
CREATE TABLE api_keys_v3 (
  id TEXT PRIMARY KEY,
  token_hash TEXT NOT NULL UNIQUE,
  role TEXT NOT NULL ${ROLE_CHECK},
  environments TEXT NOT NULL,
  label TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  revoked_at INTEGER,
  relay_url TEXT
);
INSERT INTO api_keys_v3 (id, token_hash, role, environments, label, created_at, revoked_at)
  SELECT id, token_hash, role, environments, label, created_at, revoked_at FROM api_keys;
DROP TABLE api_keys;
ALTER TABLE api_keys_v3 RENAME TO api_keys;
${ownershipAndRevocations('INTEGER')}`,
  },
  REGISTRATION_RELAY,
  AUTHORIZATION_REQUEST_ID,
  browserGrants('INTEGER'),
  AUTHORIZATION_MINTED_BY,
  KEY_ACCESS,
  SHARE_LINKS,
];

export const POSTGRES_MIGRATIONS: Migration[] = [
  ...common('BIGINT'),
  {
    version: 3,
    sql: `
ALTER TABLE api_keys DROP CONSTRAINT IF EXISTS api_keys_role_check;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_role_check ${ROLE_CHECK};
ALTER TABLE api_keys ADD COLUMN relay_url TEXT;
${ownershipAndRevocations('BIGINT')}`,
  },
  REGISTRATION_RELAY,
  AUTHORIZATION_REQUEST_ID,
  browserGrants('BIGINT'),
  AUTHORIZATION_MINTED_BY,
  KEY_ACCESS,
  SHARE_LINKS,
];
