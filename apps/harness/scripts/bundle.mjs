#!/usr/bin/env node
/**
 * Bundles the CLI (src/cli.ts and every workspace package it uses, from their TypeScript sources) into one
 * CommonJS file, dist/cli-HASH.cjs, and its starter src/main.ts into dist/main.js. A command's start is then
 * one file to read and compile instead of a few hundred modules to resolve (`harness --help` starts in about a
 * third of the time), and main.js runs that file through `vm.Script` with a V8 code cache written after a
 * command ran (src/bundle-runner.ts), which an ES module cannot have. Code reached only through import()
 * (the SDK's dialing machinery: ws, relay frames, the secure stream) is compiled with the rest but runs
 * only when a command dials: a command served by a connection master never evaluates it.
 *
 * Native addons stay outside the bundle and load from this package's own dependencies (@tether/native-crypto
 * for transport records, @tether/native-pipe for the local backend's child pipes; each has a fallback,
 * node:crypto or socketpairs): main.js imports them and hands them to the bundle. ws's optional addons are
 * left out: the harness is a WebSocket client that masks with a zero key (ws then skips masking) and receives
 * unmasked frames, so bufferutil would only cost its load (about 5 ms of a cold start); utf-8-validate has a
 * fallback in Node itself.
 *
 *   node scripts/bundle.mjs [--outdir DIR]
 *
 * DIR defaults to this package's dist/ (the build); scripts/pack.mjs bundles into the staging directory of
 * the packed package instead, so that only this build's bundle is packed.
 */
import { existsSync, readdirSync, rmSync, statSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { build } from 'esbuild';
import { workspaceSources } from '../../../scripts/bundle-sources.mjs';
import { builtinsViaRequire, lazyModules, wsAddonsLeftOut } from './plugins.mjs';

const here = new URL('..', import.meta.url);
const { values } = parseArgs({ options: { outdir: { type: 'string' } } });
const dist = values.outdir === undefined ? new URL('dist', here).pathname : resolve(values.outdir);
const NATIVE = ['@tether/native-crypto', '@tether/native-pipe'];

/** The native packages, in the bundle: what main.js was given (bundle-runner.ts `BundleContext.external`). */
const nativeFromStarter = {
  name: 'native-from-starter',
  setup(build) {
    build.onResolve({ filter: /^@tether\/native-(crypto|pipe)$/ }, (args) => ({
      path: args.path,
      namespace: 'starter',
    }));
    build.onLoad({ filter: /.*/, namespace: 'starter' }, (args) => ({
      contents: `module.exports = __tether.external[${JSON.stringify(args.path)}];`,
      loader: 'js',
    }));
  },
};

const cli = await build({
  stdin: {
    contents: "export { holdChannel, run, stdinSource } from './cli.ts';",
    resolveDir: new URL('src', here).pathname,
    sourcefile: 'cli-entry.ts',
    loader: 'ts',
  },
  outdir: dist,
  entryNames: 'cli-[hash]',
  outExtension: { '.js': '.cjs' },
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node22',
  conditions: ['tether-source'],
  // The bundle's own URL (read for the version in the package.json above it), given by main.js.
  define: { 'import.meta.url': '__tether.url' },
  // A third less source to read and hash at every start (CPU 0.92x on `exec -- true`, farm-bench 40 pairs);
  // names are kept (renaming them as well bought nothing more).
  minifyWhitespace: true,
  minifySyntax: true,
  // Lazy requires (`createRequire(import.meta.url)('NAME')`) as require(): bundled, or left out below.
  plugins: [
    workspaceSources('cli-sources', (_path, text) => text),
    nativeFromStarter,
    builtinsViaRequire,
    lazyModules,
    wsAddonsLeftOut,
  ],
  // Code that reads import.meta for anything but its URL would get an empty object: fail the build instead.
  logOverride: { 'empty-import-meta': 'error' },
  legalComments: 'none',
  logLevel: 'warning',
  metafile: true,
});
const bundle = basename(Object.keys(cli.metafile.outputs).find((file) => file.endsWith('.cjs')));

await build({
  entryPoints: { main: new URL('src/main.ts', here).pathname },
  outdir: dist,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node22',
  conditions: ['tether-source'],
  external: NATIVE,
  define: { __CLI_BUNDLE__: JSON.stringify(bundle) },
  plugins: [builtinsViaRequire],
  legalComments: 'none',
  logLevel: 'warning',
});

// Bundles (and the chunks of the ES module builds before them) of earlier builds go once they are an hour old:
// a command started from an earlier build may still be about to read its own (their names carry a hash).
const stale = (file) => Date.now() - statSync(file).mtimeMs > 3_600_000;
for (const name of readdirSync(dist)) {
  if (/^cli-\w+\.cjs$/.test(name) && name !== bundle && stale(join(dist, name))) rmSync(join(dist, name));
}
const chunks = join(dist, 'chunks');
for (const name of existsSync(chunks) ? readdirSync(chunks) : [])
  if (stale(join(chunks, name))) rmSync(join(chunks, name));
