#!/usr/bin/env node
/**
 * Builds the harness as one executable file, a Node single executable application (SEA): the CLI bundled
 * into one CommonJS script, made into a SEA blob by the Node that runs this script
 * (`--experimental-sea-config`), and injected with postject into a copy of that same Node binary. The file
 * runs on machines like this one (same OS, architecture and C library) without Node or npm installed.
 *
 *   node scripts/sea.mjs --out FILE
 *
 * What differs from the npm package's bundle (bundle.mjs):
 * - One script, no chunks: a SEA's main script cannot load files beside it (its require() knows only Node's
 *   built-ins), so the SDK's dialing machinery is inside from the start.
 * - No native addons: @tether/native-crypto and @tether/native-pipe are built in as their loaders, which
 *   report "not part of the single executable" and let the harness use node:crypto and socketpairs.
 * - The version is written in at build time: `packageVersion(import.meta.url, NAME)` reads package.json
 *   beside the code, and a SEA has none.
 * Linux only: macOS needs the binary's signature removed and remade around the injection, which is not done here.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { build } from 'esbuild';
import { replaceCall, requiredPath, workspaceSources } from '../../../scripts/bundle-sources.mjs';
import { builtinsViaRequire, lazyModules, wsAddonsLeftOut } from './plugins.mjs';

const here = new URL('..', import.meta.url);
const out = resolve(requiredPath('out', 'node scripts/sea.mjs --out FILE'));
if (process.platform !== 'linux') {
  process.stderr.write(`sea: builds on Linux only (this is ${process.platform})\n`);
  process.exit(1);
}

/** The version of each workspace app, by package name (what packageVersion would find beside the code). */
function versionOf(name) {
  for (const app of ['harness', 'executor', 'registry', 'relay']) {
    const manifest = JSON.parse(readFileSync(new URL(`../../${app}/package.json`, import.meta.url), 'utf8'));
    if (manifest.name === name) return manifest.version;
  }
  throw new Error(`no workspace app is named ${name}`);
}

/** A library loaded on first use is bundled (or its stub: workspaceSources), the version written in, no addons. */
const PACKAGE_VERSION = /\bpackageVersion\(import\.meta\.url, (['"])(@tether\/[a-z-]+)\1\)/g;
const NATIVE_LOADER = /[\\/]packages[\\/]native-(crypto|pipe)[\\/]src[\\/]index\.ts$/;
const singleExecutableSources = workspaceSources('single-executable-sources', (path, text) => {
  const source = text.replace(PACKAGE_VERSION, (_, _quote, name) => JSON.stringify(versionOf(name)));
  if (!NATIVE_LOADER.test(path)) return source;
  return replaceCall(
    path,
    source,
    'createRequire(import.meta.url)(',
    "((() => { throw new Error('native addons are not part of the single executable'); }) as (id: string) => never)(",
  );
});

const work = mkdtempSync(join(tmpdir(), 'tether-sea-'));
try {
  const main = join(work, 'harness.cjs');
  await build({
    stdin: {
      // A SEA's process.argv is [execPath, argv[0] as typed, ...args], and a connection master is started as
      // `execPath process.argv[1] master serve` (reuse/client.ts), which would hand the new process the typed
      // name as its first argument. So argv[1] is a marker that the started process drops again.
      contents: `import { run } from './cli.ts';
const SELF = '--tether-single-executable';
const args = process.argv.slice(2);
if (args[0] === SELF) args.shift();
process.argv[1] = SELF;
run(args, { stdin: process.stdin, stdout: process.stdout, stderr: process.stderr, env: process.env }).then(
  (code) => { process.exitCode = code; },
);`,
      resolveDir: new URL('src', here).pathname,
      sourcefile: 'sea-main.ts',
      loader: 'ts',
    },
    outfile: main,
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node22',
    conditions: ['tether-source'],
    plugins: [singleExecutableSources, builtinsViaRequire, lazyModules, wsAddonsLeftOut],
    // Code that still reads import.meta would get an empty object in CommonJS: fail the build instead.
    logOverride: { 'empty-import-meta': 'error' },
    legalComments: 'none',
    logLevel: 'warning',
  });

  const blob = join(work, 'harness.blob');
  const config = join(work, 'sea-config.json');
  writeFileSync(config, JSON.stringify({ main, output: blob, disableExperimentalSEAWarning: true }));
  execFileSync(process.execPath, ['--experimental-sea-config', config], { stdio: ['ignore', 'ignore', 'inherit'] });

  // The fuse Node checks at start to look for the blob, read from the binary itself.
  const node = readFileSync(process.execPath);
  const fuse = /NODE_SEA_FUSE_[0-9a-f]+(?=:0)/.exec(node.toString('latin1'))?.[0];
  if (!fuse) throw new Error(`${process.execPath} has no single-executable fuse (a Node built without SEA support?)`);
  copyFileSync(process.execPath, out);
  chmodSync(out, 0o755);
  const { inject } = createRequire(new URL('package.json', here))('postject');
  await inject(out, 'NODE_SEA_BLOB', readFileSync(blob), { sentinelFuse: fuse });
  process.stdout.write(`${out}\n`);
} catch (err) {
  rmSync(out, { force: true });
  throw err;
} finally {
  rmSync(work, { recursive: true, force: true });
}
