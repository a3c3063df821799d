import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { openPostgresStore, openSqliteStore, type RegistryStore } from '../store/index.js';

const PG_URL = process.env.TETHER_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** A store engine for tests of the app over both: a fresh store, and how to throw it away. */
export interface Engine {
  name: string;
  open(): Promise<{ store: RegistryStore; drop(): Promise<void> }>;
}

/** SQLite in memory, and PostgreSQL in a schema of its own (dropped by `drop`), for `describe.each`. */
export const ENGINES: readonly Engine[] = [
  { name: 'sqlite', open: async () => ({ store: openSqliteStore(':memory:'), drop: async () => {} }) },
  {
    name: 'postgres',
    open: async () => {
      const schema = `registry_test_${randomBytes(6).toString('hex')}`;
      const store = await openPostgresStore({ connectionString: PG_URL, schema, max: 4, cacheTtlMs: 0 });
      return {
        store,
        drop: async () => {
          const client = new pg.Client({ connectionString: PG_URL });
          await client.connect();
          await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
          await client.end();
        },
      };
    },
  },
];
