#!/usr/bin/env node
// `pnpm fuzz`: the property-based fuzz tests (`*.fuzz.test.ts`) with many more runs than CI gives them.
// CI runs the same files in each package's ordinary `vitest run` with a small default; here every property
// runs TETHER_FUZZ_RUNS times (default 20 000; `pnpm fuzz -- --runs 100000` or the env var to change it),
// one package at a time (the machine is shared), without per-test timeouts. A failure prints fast-check's
// seed and path: rerun that file with them to reproduce it, then keep the case as a named regression test.
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const SKIP = new Set(['node_modules', 'dist', '.turbo', '.git']);

function runsFromArgs(argv) {
  const at = argv.indexOf('--runs');
  if (at === -1) return process.env.TETHER_FUZZ_RUNS ?? '20000';
  const value = argv[at + 1];
  if (!/^\d+$/.test(value ?? '') || Number(value) < 1) {
    console.error('fuzz: --runs needs a positive integer, e.g. --runs 50000');
    process.exit(2);
  }
  return value;
}

/** `*.fuzz.test.ts` files under `dir`, grouped by the package directory (the one holding `src`). */
function findFuzzFiles(dir, byPackage) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (SKIP.has(entry.name)) continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) findFuzzFiles(path, byPackage);
    else if (entry.name.endsWith('.fuzz.test.ts')) {
      const pkg = path.slice(0, path.lastIndexOf('/src/'));
      byPackage.set(pkg, [...(byPackage.get(pkg) ?? []), relative(pkg, path)]);
    }
  }
  return byPackage;
}

const USAGE = `usage: node scripts/fuzz.mjs [--runs N]   (also: pnpm fuzz -- --runs N)
Runs every *.fuzz.test.ts, one package at a time, with N runs per property (default 20000, or
TETHER_FUZZ_RUNS). TETHER_FUZZ_SEED=<seed> replays a failure's seed. Exit 1 when any property fails.
`;
const args = process.argv.slice(2).filter((arg) => arg !== '--');
if (args.includes('--help') || args.includes('-h')) {
  process.stdout.write(USAGE);
  process.exit(0);
}
const unknown = args.filter((arg, i) => arg !== '--runs' && args[i - 1] !== '--runs');
if (unknown.length > 0) {
  process.stderr.write(`fuzz: unknown argument ${unknown[0]}\n${USAGE}`);
  process.exit(2);
}
const runs = runsFromArgs(args);
const packages = new Map();
for (const top of ['apps', 'packages']) findFuzzFiles(join(root, top), packages);
const failed = [];
for (const [pkg, files] of [...packages].sort()) {
  console.log(`\n== fuzz ${relative(root, pkg)} (${runs} runs per property): ${files.join(' ')}`);
  const result = spawnSync('npx', ['vitest', 'run', '--testTimeout=0', '--hookTimeout=0', ...files], {
    cwd: pkg,
    stdio: 'inherit',
    env: { ...process.env, TETHER_FUZZ_RUNS: runs },
  });
  if (result.status !== 0) failed.push(relative(root, pkg));
}
if (failed.length > 0) {
  console.error(`\nfuzz: failures in ${failed.join(', ')} (the seed and counterexample are printed above)`);
  process.exit(1);
}
console.log(`\nfuzz: ${packages.size} packages passed`);
