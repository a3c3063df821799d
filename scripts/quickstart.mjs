#!/usr/bin/env node
// `npm run quickstart`: installs, builds and runs the local stack (scripts/stack.mjs, which takes the same
// flags). On a machine whose Node is below Tether's floor it runs all of that on the pinned Node 24, fetched
// from the npm registry (scripts/runtime.mjs), and says so.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { ensureSupportedNode, root } from './runtime.mjs';

await ensureSupportedNode('npm run quickstart');

for (const args of [['install'], ['run', 'build']]) {
  const run = spawnSync(process.execPath, [join(root, 'scripts', 'pnpm.mjs'), ...args], {
    stdio: 'inherit',
    cwd: root,
  });
  if (run.status !== 0) {
    console.error(`quickstart: pnpm ${args.join(' ')} failed (${run.error?.message ?? `exit ${run.status}`})`);
    process.exit(run.status || 1);
  }
}
await import('./stack.mjs');
