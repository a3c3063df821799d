#!/usr/bin/env node
/**
 * Packs the installable CLIs, @tether/harness and @tether/executor, as npm tarballs:
 *
 *   node scripts/pack.mjs [--out DIR] [harness|executor …]
 *
 * writes DIR/tether-harness-VERSION.tgz and DIR/tether-executor-VERSION.tgz (DIR defaults to ./packed) and
 * prints their paths, one a line. Each installs with `npm install -g FILE.tgz` and needs nothing of ours from a
 * registry: the workspace packages are private and unpublished, so every one of them is bundled.
 *
 * Why a staging directory, not `npm pack` in apps/*: a workspace package.json names its siblings as
 * `workspace:*` and carries the tsc build, tests' dev dependencies and `private: true` (which keeps the
 * workspace form from ever being published). The staging directory holds what a user installs:
 *
 *   package.json   name, version, description, license, keywords, type, engines, bin from the app's own
 *                  package.json; no `private`, so `npm publish` of the tarball works
 *   bin/NAME.js    the app's launcher (runs ../dist/main.js, as in the workspace), bundled with the Node
 *                  version check it imports from @tether/telemetry
 *   dist/          the esbuild bundle of the app (apps/APP/scripts/bundle.mjs), third-party libraries inside
 *   node_modules/@tether/native-crypto, native-pipe
 *                  bundled dependencies: each package's JavaScript loader and its addon when it was built
 *                  here (N-API, so any Node of `engines` on this platform); elsewhere, or without the
 *                  addon, the loader says why and the app uses node:crypto / socketpairs
 *   LICENSE, README.md
 *
 * The executor also names node-pty (PTYs) and bufferutil (WebSocket masking) as optionalDependencies, loaded
 * lazily: `npm install` fetches them from the npm registry when it can and goes on without them when it
 * cannot (`--omit=optional` or `--offline` without a cache); a PTY request then fails with an error saying
 * node-pty is not installed.
 */
import { execFileSync } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { builtinModules, createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const root = fileURLToPath(new URL('..', import.meta.url));
const readJson = (file) => JSON.parse(readFileSync(file, 'utf8'));

/** Our native packages: shipped as bundled dependencies (loader + addon when built). */
const NATIVE = {
  '@tether/native-crypto': { dir: 'packages/native-crypto', addon: 'native/build/Release/tether_crypto.node' },
  '@tether/native-pipe': { dir: 'packages/native-pipe', addon: 'native/build/Release/tether_pipe.node' },
};

/**
 * What each app's bundle may import at run time besides Node's built-ins: the native packages (bundled
 * dependencies), the third-party optional addons with the workspace package.json that pins each, and what
 * the bundle may try to load but copes without (`leftOut`: not shipped, not a dependency).
 */
const APPS = {
  harness: {
    native: ['@tether/native-crypto', '@tether/native-pipe'],
    optional: {},
    // user-read's masking helper (the harness bundle leaves it out: see apps/harness/scripts/bundle.mjs).
    leftOut: ['bufferutil'],
  },
  executor: {
    native: ['@tether/native-crypto', '@tether/native-pipe'],
    optional: { 'node-pty': 'packages/local-process/package.json', bufferutil: 'apps/executor/package.json' },
    // ws's other optional helper: Node validates UTF-8 itself. reflect-metadata is bundled (credential masking's
    // certificates); tsyringe's error text `import "reflect-metadata"` reads as a load to this check.
    leftOut: ['utf-8-validate', 'reflect-metadata'],
  },
};

function usage(message) {
  process.stderr.write(`pack: ${message}\nusage: node scripts/pack.mjs [--out DIR] [harness|executor …]\n`);
  process.exit(2);
}

const { values, positionals } = parseArgs({
  options: { out: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
  allowPositionals: true,
});
if (values.help) {
  process.stdout.write(
    'usage: node scripts/pack.mjs [--out DIR] [harness|executor …]\n\n' +
      'Bundles each app and writes DIR/tether-APP-VERSION.tgz (default DIR: ./packed; default: both apps).\n' +
      'Install one with: npm install -g DIR/tether-harness-VERSION.tgz\n',
  );
  process.exit(0);
}
const apps = positionals.length > 0 ? positionals : Object.keys(APPS);
for (const app of apps) if (!(app in APPS)) usage(`unknown app ${JSON.stringify(app)}`);
const out = resolve(values.out ?? 'packed');
mkdirSync(out, { recursive: true });

// esbuild is a dev dependency of both apps; the native loaders are transpiled with it too.
const esbuild = await import(
  pathToFileURL(createRequire(join(root, 'apps', 'harness', 'package.json')).resolve('esbuild')).href
);

const staging = mkdtempSync(join(tmpdir(), 'tether-pack-'));
try {
  for (const app of apps) process.stdout.write(`${packApp(app, join(staging, app))}\n`);
} finally {
  rmSync(staging, { recursive: true, force: true });
}

function packApp(app, dir) {
  const appDir = join(root, 'apps', app);
  const source = readJson(join(appDir, 'package.json'));
  const { native, optional, leftOut } = APPS[app];
  mkdirSync(dir, { recursive: true });

  execFileSync(process.execPath, [join(appDir, 'scripts', 'bundle.mjs'), '--outdir', join(dir, 'dist')], {
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  checkImports(app, join(dir, 'dist'), [...native, ...Object.keys(optional), ...leftOut]);

  for (const [name, target] of Object.entries(source.bin)) {
    const file = join(dir, target);
    // The launcher with @tether/telemetry's launch.js inside (no workspace package is installed beside it).
    esbuild.buildSync({
      entryPoints: [join(appDir, target)],
      outfile: file,
      bundle: true,
      platform: 'node',
      format: 'esm',
      logLevel: 'warning',
    });
    chmodSync(file, 0o755);
    if (!readFileSync(file, 'utf8').startsWith('#!/usr/bin/env node'))
      throw new Error(`${name}: ${target} has no shebang`);
  }
  copyFileSync(join(appDir, 'LICENSE'), join(dir, 'LICENSE'));
  if (existsSync(join(appDir, 'README.md'))) copyFileSync(join(appDir, 'README.md'), join(dir, 'README.md'));

  const dependencies = {};
  for (const name of native) dependencies[name] = stageNative(name, join(dir, 'node_modules', name), source.license);
  const optionalDependencies = {};
  for (const [name, pinnedBy] of Object.entries(optional)) {
    const version = readJson(join(root, pinnedBy)).dependencies?.[name];
    if (!/^\d+\.\d+\.\d+$/.test(version ?? '')) throw new Error(`${pinnedBy} does not pin ${name} exactly`);
    optionalDependencies[name] = version;
  }

  const manifest = {
    name: source.name,
    version: source.version,
    description: source.description,
    license: source.license,
    keywords: source.keywords,
    type: source.type,
    engines: source.engines,
    bin: source.bin,
    files: source.files,
    dependencies,
    bundleDependencies: Object.keys(dependencies),
    ...(Object.keys(optionalDependencies).length > 0 ? { optionalDependencies } : {}),
  };
  for (const field of ['description', 'license', 'engines', 'bin', 'files']) {
    if (manifest[field] === undefined) throw new Error(`apps/${app}/package.json has no ${field}`);
  }
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);

  const [result] = JSON.parse(
    execFileSync('npm', ['pack', '--json', '--pack-destination', out], {
      cwd: dir,
      encoding: 'utf8',
      // No lifecycle scripts of ours run in the staging directory; keep npm quiet and off the network.
      env: {
        ...process.env,
        npm_config_ignore_scripts: 'true',
        npm_config_update_notifier: 'false',
        npm_config_fund: 'false',
        npm_config_audit: 'false',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    }),
  );
  return join(out, result.filename);
}

/** A native package's loader (transpiled from its source) and its addon when built; returns its version. */
function stageNative(name, dir, license) {
  const { dir: packageDir, addon } = NATIVE[name];
  const source = readJson(join(root, packageDir, 'package.json'));
  esbuild.buildSync({
    entryPoints: [join(root, packageDir, 'src', 'index.ts')],
    outfile: join(dir, 'dist', 'index.js'),
    bundle: false,
    platform: 'node',
    format: 'esm',
    target: 'node22',
    logLevel: 'warning',
  });
  const files = ['dist'];
  const built = join(root, packageDir, addon);
  if (existsSync(built)) {
    mkdirSync(dirname(join(dir, addon)), { recursive: true });
    copyFileSync(built, join(dir, addon));
    files.push(addon);
  } else {
    process.stderr.write(`pack: ${name}'s addon is not built (${relative(root, built)}); packed without it\n`);
  }
  copyFileSync(join(root, 'LICENSE'), join(dir, 'LICENSE'));
  const manifest = {
    name,
    version: source.version,
    license,
    type: 'module',
    exports: { '.': './dist/index.js' },
    files,
  };
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  return source.version;
}

/**
 * Every bare module the bundle loads at run time must be a Node built-in or one of `allowed`: anything else
 * (a workspace package, or a library the bundler did not see) would fail only on the user's machine. Loads
 * are static and dynamic imports, require() calls (not methods named require), and
 * `createRequire(import.meta.url)("NAME")`.
 */
function checkImports(app, dist, allowed) {
  const builtins = new Set(builtinModules);
  const seen = new Set();
  const patterns = [
    /(?<![.\w$])(?:from\s*|import\s*\(\s*|import\s+|(?:__)?require\s*\(\s*)"([^"./][^"]*)"/g,
    /\(import\.meta\.url\)\s*\(\s*"([^"./][^"]*)"/g,
  ];
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const file = join(dir, entry.name);
      if (entry.isDirectory()) walk(file);
      else if (/\.c?js$/.test(entry.name)) {
        const text = readFileSync(file, 'utf8');
        for (const pattern of patterns) for (const match of text.matchAll(pattern)) seen.add(match[1]);
      }
    }
  };
  walk(dist);
  const unknown = [...seen].filter(
    (name) => !name.startsWith('node:') && !builtins.has(name) && !allowed.includes(name),
  );
  if (unknown.length > 0) {
    throw new Error(`${app}'s bundle loads what the package does not ship: ${unknown.join(', ')}`);
  }
}
