#!/usr/bin/env node
// `npm run quickstart`: installs, builds and runs the local stack (scripts/stack.mjs, which takes the same
// flags). On a machine whose Node is below Tether's floor it runs all of that on the pinned Node 24, fetched
// from the npm registry (scripts/runtime.mjs), and says so. Before installing it checks what stack.mjs would
// refuse (a port in use, a stack already running from the data directory) and takes the data directory's lock,
// so that a second quickstart says so at once and touches nothing.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { ensureSupportedNode, root } from './runtime.mjs';
import { lockDataDir, parseStackArgs, preflight, USAGE } from './stack-preflight.mjs';

await ensureSupportedNode('npm run quickstart');

const options = parseStackArgs();
if (options.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}
await preflight(options);
lockDataDir(options);

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
