#!/usr/bin/env node
/**
 * `npm test`: everything CI runs, in phases, each timed.
 *
 *   node scripts/test.mjs              every phase, in order
 *   node scripts/test.mjs PHASE…       only these phases (after install and build), e.g. `e2e reliability`
 *   node scripts/test.mjs --list       the phases and what each runs
 *
 * The primary runtime is the machine's Node when it is at least the floor (22), otherwise the pinned Node 24
 * (scripts/runtime.mjs fetches it from the npm registry and says so). The last phase runs what depends on the
 * runtime (native addons, private fields, crypto, the store, a sample of conformance and e2e) again on the
 * other pinned runtime: Node 22 when the primary is 24, Node 24 otherwise.
 *
 * Each phase prints `phase NAME: M.M min (ok|failed)` as it ends, and a table of all of them at the end. A
 * failed install or build stops the run (nothing else can run); any other failure is reported at the end.
 * Suites whose tests mostly wait on real processes run their files in parallel; throughput, memory and load
 * files run one at a time, alone, because their figures and bounds mean something only then.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { currentMajor, ensureSupportedNode, FLOOR, PRIMARY, RUNTIMES, root, runtimeEnv } from './runtime.mjs';

await ensureSupportedNode('npm test');

const { install: installRuntimeWithAddons } = await import('./node-runtimes.mjs');

const vitest = join(root, 'node_modules', 'vitest', 'vitest.mjs');
const pnpm = (...args) => ({ command: process.execPath, args: [join(root, 'scripts', 'pnpm.mjs'), ...args] });
const inTests = (...args) => ({ command: process.execPath, args: [vitest, 'run', ...args], cwd: join(root, 'tests') });

/** Files that measure throughput or memory, or load the machine: one at a time, with nothing beside them. */
const SERIAL_E2E = ['e2e/streaming.test.ts', 'e2e/harness-cp.test.ts', 'e2e/harness-cp-many.test.ts'];
/**
 * Files that run sandboxes with /tmp writable, ours and codex's: one at a time. Every such sandbox keeps `.git`,
 * `.codex`, `.agents` and `.aws` in /tmp read-only, making a missing one as a mount point and removing it when it
 * ends. /tmp is the host's, shared by every executor of the run, so one executor's removal could come between
 * another's plan and its mount (a CI run saw both executors' starts fail so, in two files at once): the files
 * race each other, not themselves (one executor counts its own sandboxes' mount points).
 */
const SANDBOX_CONFORMANCE = [
  'conformance/sandbox.test.ts',
  'conformance/sandbox-streaming.test.ts',
  'conformance/sandbox-globs.test.ts',
  'conformance/sandbox-root-write.test.ts',
  'conformance/sandbox-seccomp.test.ts',
  'conformance/shell-snapshot.test.ts',
  'conformance/network-proxy.test.ts',
  'conformance/credential-masking.test.ts',
  'conformance/transparent-tcp.test.ts',
];
/** Workers for files that mostly wait on real processes (two cores here; each file's stack is mostly idle). */
const WAITING_WORKERS = '3';

const secondMajor = currentMajor() === PRIMARY ? FLOOR : PRIMARY;

/** What depends on the runtime, run again on the second one. */
const RUNTIME_SUITES = [
  { name: 'native addons, private fields, crypto', cwd: 'packages/user-read', args: ['run'] },
  { name: 'native addons', cwd: 'packages/native-crypto', args: ['run'] },
  { name: 'native addons', cwd: 'packages/native-pipe', args: ['run'] },
  { name: 'noise', cwd: 'packages/noise', args: ['run'] },
  { name: 'secure-stream', cwd: 'packages/secure-stream', args: ['run'] },
  { name: 'local-process', cwd: 'packages/local-process', args: ['run'] },
  { name: 'registry store', cwd: 'apps/registry', args: ['run', 'src/store'] },
  {
    name: 'conformance and e2e sample',
    cwd: 'tests',
    args: [
      'run',
      `--maxWorkers=${WAITING_WORKERS}`,
      'conformance/protocol.test.ts',
      'conformance/exec-process.test.ts',
      'conformance/transport.test.ts',
      'e2e/harness-terminal.test.ts',
      'e2e/harness-errors.test.ts',
      'e2e/security.test.ts',
    ],
  },
];

const PHASES = [
  { name: 'install', what: 'pnpm install --frozen-lockfile', critical: true, ...pnpm('install', '--frozen-lockfile') },
  { name: 'build', what: 'turbo run build', critical: true, ...pnpm('exec', 'turbo', 'run', 'build') },
  { name: 'lint', what: 'biome ci .', ...pnpm('exec', 'biome', 'ci', '.') },
  { name: 'typecheck', what: 'turbo run typecheck', ...pnpm('exec', 'turbo', 'run', 'typecheck') },
  {
    name: 'unit',
    what: "every package's own tests (turbo, two packages at a time)",
    ...pnpm('exec', 'turbo', 'run', 'test', '--concurrency=2', '--filter=!@tether/tests'),
  },
  {
    name: 'conformance',
    what: `tests/conformance: ours and codex's exec-server, black box (${WAITING_WORKERS} files at a time)`,
    ...inTests(
      `--maxWorkers=${WAITING_WORKERS}`,
      ...SANDBOX_CONFORMANCE.flatMap((file) => ['--exclude', file]),
      'conformance',
    ),
  },
  {
    name: 'conformance-sandbox',
    what: 'tests/conformance files whose sandboxes make /tmp writable, one at a time',
    ...inTests('--no-file-parallelism', ...SANDBOX_CONFORMANCE),
  },
  {
    name: 'e2e',
    what: `tests/e2e, interop, infra, repo: the real binaries (${WAITING_WORKERS} files at a time)`,
    ...inTests(
      `--maxWorkers=${WAITING_WORKERS}`,
      ...SERIAL_E2E.flatMap((file) => ['--exclude', file]),
      'e2e',
      'interop',
      'infra',
      'repo',
    ),
  },
  {
    name: 'e2e-throughput',
    what: 'tests/e2e files that bound throughput or memory, one at a time',
    ...inTests('--no-file-parallelism', ...SERIAL_E2E),
  },
  {
    name: 'reliability',
    what: 'tests/reliability: load, chaos, kills, failover, one file at a time',
    command: process.execPath,
    args: [vitest, 'run', '-c', 'vitest.reliability.config.ts'],
    cwd: join(root, 'tests'),
  },
  {
    name: 'runtime',
    what: `what depends on the runtime, again on the pinned Node ${RUNTIMES[secondMajor].version}`,
    run: runtimePass,
  },
];

function minutes(ms) {
  return (ms / 60_000).toFixed(1);
}

/** Runs one command to its end, output passed through; its exit code (1 when it could not start). */
function runCommand(command, args, options = {}) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { stdio: ['ignore', 'inherit', 'inherit'], cwd: root, ...options });
    const forward = (signal) => child.kill(signal);
    process.on('SIGINT', forward);
    process.on('SIGTERM', forward);
    const done = (code) => {
      process.off('SIGINT', forward);
      process.off('SIGTERM', forward);
      resolve(code);
    };
    child.on('error', (err) => {
      console.error(`test: could not start ${command}: ${err.message}`);
      done(1);
    });
    child.on('exit', (code, signal) => done(code ?? (signal ? 1 : 0)));
  });
}

async function runtimePass() {
  const dir = installRuntimeWithAddons(secondMajor);
  const node = join(dir, 'bin', 'node');
  let status = 0;
  for (const suite of RUNTIME_SUITES) {
    console.log(`\n--- Node ${RUNTIMES[secondMajor].version}: ${suite.name} (${suite.cwd}) ---`);
    const code = await runCommand(node, [vitest, ...suite.args], { cwd: join(root, suite.cwd), env: runtimeEnv(dir) });
    if (code !== 0) status = code;
  }
  return status;
}

function selectPhases(names) {
  if (names.length === 0) return PHASES;
  const unknown = names.filter((name) => !PHASES.some((phase) => phase.name === name));
  if (unknown.length > 0) {
    console.error(`test: no phase ${unknown.join(', ')} (phases: ${PHASES.map((phase) => phase.name).join(', ')})`);
    process.exit(2);
  }
  return PHASES.filter((phase) => phase.critical || names.includes(phase.name));
}

const args = process.argv.slice(2);
if (args.includes('--help') || args.includes('-h') || args.includes('--list')) {
  if (!args.includes('--list')) console.log('usage: node scripts/test.mjs [PHASE…] | --list\n');
  for (const phase of PHASES) console.log(`${phase.name.padEnd(16)} ${phase.what}`);
  process.exit(0);
}

console.log(
  `test: Node ${process.versions.node} is the primary runtime; Node ${RUNTIMES[secondMajor].version} runs the last pass`,
);
const results = [];
const started = Date.now();
for (const phase of selectPhases(args)) {
  console.log(`\n=== phase ${phase.name}: ${phase.what} ===`);
  const at = Date.now();
  const code = phase.run ? await phase.run() : await runCommand(phase.command, phase.args, { cwd: phase.cwd ?? root });
  const ms = Date.now() - at;
  const ok = code === 0;
  results.push({ name: phase.name, ms, ok });
  console.log(`phase ${phase.name}: ${minutes(ms)} min (${ok ? 'ok' : 'failed'})`);
  if (!ok && phase.critical) {
    console.error(`test: ${phase.name} failed; nothing else can run`);
    break;
  }
}

console.log('\n| phase | minutes | result |\n|---|---:|---|');
for (const { name, ms, ok } of results) console.log(`| ${name} | ${minutes(ms)} | ${ok ? 'ok' : 'failed'} |`);
console.log(`| total | ${minutes(Date.now() - started)} | |`);
const failed = results.filter((result) => !result.ok);
if (failed.length > 0) console.error(`test: failed phases: ${failed.map((result) => result.name).join(', ')}`);
process.exitCode = failed.length > 0 ? 1 : 0;
