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
 * Native addons: node-pty, bufferutil and our own (@tether/native-crypto, @tether/native-pipe) are N-API and
 * load on every Node as built; better-sqlite3 links V8 and is rebuilt per ABI (about a minute each, cached)
 * into its package's `build/abi-<NODE_MODULE_VERSION>/`, where the registry looks first
 * (apps/registry/src/store/sqlite-binding.ts).
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { cacheRoot, fail, installRuntime, RUNTIMES, root, runOrFail, runtimeEnv } from './runtime.mjs';

const require = createRequire(join(root, 'apps', 'registry', 'package.json'));

/** better-sqlite3 built for the runtime's ABI, from the installed package's own sources, cached. */
function installSqliteAddon(dir) {
  const node = join(dir, 'bin', 'node');
  const abi = runOrFail(node, ['-p', 'process.versions.modules']).trim();
  const packageRoot = dirname(require.resolve('better-sqlite3/package.json'));
  const { version } = JSON.parse(readFileSync(join(packageRoot, 'package.json'), 'utf8'));
  const target = join(packageRoot, 'build', `abi-${abi}`, 'better_sqlite3.node');
  const cached = join(cacheRoot, 'addons', `better-sqlite3-${version}-abi${abi}.node`);
  // A cached build that this runtime cannot load (built against other headers) is made again.
  const loads = (file) =>
    spawnSync(node, ['-e', `process.dlopen({ exports: {} }, ${JSON.stringify(file)})`]).status === 0;
  if (existsSync(cached) && !loads(cached)) {
    console.error(`node-runtimes: the cached better-sqlite3 for ABI ${abi} does not load; building it again`);
    rmSync(cached, { force: true });
  }
  if (!existsSync(cached)) {
    console.error(`node-runtimes: building better-sqlite3 ${version} for ABI ${abi} (about a minute)`);
    const scratch = mkdtempSync(join(tmpdir(), 'tether-sqlite-'));
    try {
      for (const part of ['binding.gyp', 'package.json', 'src', 'deps']) {
        cpSync(join(packageRoot, part), join(scratch, part), { recursive: true });
      }
      const nodeGyp = createRequire(join(root, 'packages', 'native-crypto', 'package.json')).resolve(
        'node-gyp/bin/node-gyp.js',
      );
      // The runtime's own headers: an npm_config_nodedir in the environment (.ci/run sets one for the host's
      // node) would otherwise win over --nodedir and build for the wrong ABI.
      const env = { ...process.env, npm_config_nodedir: dir, NPM_CONFIG_NODEDIR: dir };
      runOrFail(node, [nodeGyp, 'rebuild', '--release', `--nodedir=${dir}`, '-j', 'max'], { cwd: scratch, env });
      const built = join(scratch, 'build', 'Release', 'better_sqlite3.node');
      if (!loads(built)) fail(`better-sqlite3 built for ABI ${abi} does not load in Node ${dir}`);
      mkdirSync(dirname(cached), { recursive: true });
      copyFileSync(built, `${cached}.partial`);
      renameSync(`${cached}.partial`, cached);
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  }
  mkdirSync(dirname(target), { recursive: true });
  copyFileSync(cached, target);
}

/** The runtime's directory, with better-sqlite3 built for its ABI. */
export function install(major) {
  const dir = installRuntime(major);
  installSqliteAddon(dir);
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
