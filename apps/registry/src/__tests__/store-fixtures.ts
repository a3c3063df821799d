/** The two store engines on fresh databases (reopenable), and the rows the store tests make. */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { openPostgresStore, openSqliteStore, type RegistryStore } from '../store/index.js';

export const PG_URL = process.env.TETHER_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

export interface Engine {
  name: string;
  /** Opens a new store on a fresh database; `again()` opens a second store on that same database. */
  fresh(): Promise<{ store: RegistryStore; again(): Promise<RegistryStore>; drop(): Promise<void> }>;
}

export const sqlite: Engine = {
  name: 'sqlite',
  async fresh() {
    const dir = mkdtempSync(join(tmpdir(), 'registry-store-'));
    const path = join(dir, 'registry.db');
    return {
      store: openSqliteStore(path),
      again: async () => openSqliteStore(path),
      drop: async () => rmSync(dir, { recursive: true, force: true }),
    };
  },
};

export const postgres: Engine = {
  name: 'postgres',
  async fresh() {
    const schema = `registry_test_${randomBytes(6).toString('hex')}`;
    const open = () => openPostgresStore({ connectionString: PG_URL, schema, max: 4 });
    return {
      store: await open(),
      again: open,
      drop: async () => {
        const client = new pg.Client({ connectionString: PG_URL });
        await client.connect();
        await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        await client.end();
      },
    };
  },
};

export const key = (over: Partial<{ id: string; tokenHash: string }> = {}) => ({
  id: over.id ?? `key-${randomBytes(4).toString('hex')}`,
  tokenHash: over.tokenHash ?? randomBytes(32).toString('hex'),
  role: 'executor' as const,
  environments: 'dev-*',
  label: 'ci',
  createdAt: 1_000,
});

export const registration = (environmentId: string, registrationId: string) => ({
  environmentId,
  registrationId,
  securityProfile: 'noise_hybrid_ik_v1',
  executorPublicKey: '{"suite":"s"}',
  apiKeyId: 'key-1',
  createdAt: 2_000,
  relayUrl: 'ws://a' as string | null,
});

/** Creates the active executor key `id` that registrations are made with (putRegistration checks it). */
export const executorKey = (store: RegistryStore, id = 'key-1') => store.createApiKey(key({ id }));

export const authorization = (tokenHash: string, expiresAt = 10_000) => ({
  tokenHash,
  environmentId: 'dev-1',
  registrationId: 'reg-1',
  harnessPublicKey: '{"harness":1}',
  expiresAt,
});
