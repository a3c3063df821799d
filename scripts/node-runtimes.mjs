#!/usr/bin/env node
/**
 * The pinned Node runtimes (scripts/runtime.mjs: Node 22, the floor, and 24, CI's primary), from the npm
 * registry only.
 *
 *   node scripts/node-runtimes.mjs list              the pinned runtimes
 *   node scripts/node-runtimes.mjs install [MAJOR…]  fetch, verify and unpack them; build per-ABI addons
 *   node scripts/node-runtimes.mjs bin MAJOR         print the runtime's bin directory (installs it first)
 *   node scripts/node-runtimes.mjs run MAJOR -- CMD  run CMD with that runtime's `node` first on PATH
 *
 * `npm test` (scripts/test.mjs) runs its second pass on the other runtime through this file's `install`.
 * Native addons: node-pty, bufferutil, better-sqlite3 (13 and later: its prebuilt addon) and our own
 * (@tether/native-crypto, @tether/native-pipe) are all N-API and load on every Node as installed; `install`
 * checks that better-sqlite3 does on each runtime.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { fail, installRuntime, RUNTIMES, root, runtimeEnv } from './runtime.mjs';

const require = createRequire(join(root, 'apps', 'registry', 'package.json'));

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

/** The runtime's directory, with better-sqlite3 checked to load on it. */
export function install(major) {
  const dir = installRuntime(major);
  checkSqliteAddon(dir);
  return dir;
}
function run(major, command) {
  if (command.length === 0) fail('run: nothing to run (node-runtimes.mjs run MAJOR -- CMD ARGS…)');
  const dir = install(major);
  const child = spawnSync(command[0], command.slice(1), { stdio: 'inherit', env: runtimeEnv(dir) });
  return child.status ?? 1;
}

function main() {
  const [verb, ...rest] = process.argv.slice(2);
  const majors = (list) => (list.length > 0 ? list : Object.keys(RUNTIMES));
  switch (verb) {
    case 'list':
      for (const [major, { version }] of Object.entries(RUNTIMES)) console.log(`${major}\t${version}`);
      break;
    case 'install':
      for (const major of majors(rest)) console.log(join(install(major), 'bin'));
      break;
    case 'bin':
      if (rest.length !== 1) fail('bin: give one major version');
      console.log(join(install(rest[0]), 'bin'));
      break;
    case 'run': {
      const at = rest.indexOf('--');
      if (at !== 1) fail('usage: node-runtimes.mjs run MAJOR -- CMD ARGS…');
      process.exitCode = run(rest[0], rest.slice(2));
      break;
    }
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
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) main();
