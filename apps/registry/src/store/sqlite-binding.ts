import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

/**
 * better-sqlite3 links against V8 rather than N-API, so its addon (`build/Release/better_sqlite3.node`) loads
 * only on the Node ABI it was compiled for: the one that ran `pnpm install`. For every other Node that runs
 * the registry from the same checkout (CI's Node 22 and 24, `scripts/node-runtimes.mjs`), an addon built
 * for that ABI sits beside it at `build/abi-<NODE_MODULE_VERSION>/better_sqlite3.node` and is chosen here.
 * Without one, better-sqlite3's own lookup runs (and names the ABI mismatch if there is one).
 */
export function sqliteNativeBinding(): string | undefined {
  const root = dirname(createRequire(import.meta.url).resolve('better-sqlite3/package.json'));
  const candidate = join(root, 'build', `abi-${process.versions.modules}`, 'better_sqlite3.node');
  return existsSync(candidate) ? candidate : undefined;
}
