import { openPostgresStore } from './postgres.js';
import { openSqliteStore } from './sqlite.js';
import type { RegistryStore } from './types.js';

export { openPostgresStore } from './postgres.js';
export { openSqliteStore } from './sqlite.js';
export * from './types.js';

/** Opens `sqlite:PATH` (or `sqlite::memory:`) or `postgres://…` / `postgresql://…`. */
export async function openStore(
  database: string,
  options: { schema?: string; sqliteBackgroundCheckpointMs?: number } = {},
): Promise<RegistryStore> {
  if (database.startsWith('sqlite:')) {
    const { sqliteBackgroundCheckpointMs: backgroundCheckpointMs } = options;
    return openSqliteStore(database.slice('sqlite:'.length), backgroundCheckpointMs ? { backgroundCheckpointMs } : {});
  }
  if (/^postgres(ql)?:\/\//.test(database)) {
    return openPostgresStore({ connectionString: database, ...(options.schema ? { schema: options.schema } : {}) });
  }
  throw new Error('database must be sqlite:PATH or postgres://…');
}
