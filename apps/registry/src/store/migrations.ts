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

export const SQLITE_MIGRATIONS = common('INTEGER');
export const POSTGRES_MIGRATIONS = common('BIGINT');
