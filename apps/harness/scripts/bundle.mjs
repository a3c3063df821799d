#!/usr/bin/env node
/**
 * Bundles the CLI (src/main.ts and every workspace package it uses, from their TypeScript sources) into
 * one ESM file, dist/main.js. A command's start is then one file to read and compile instead of a few
 * hundred modules to resolve: `harness --help` starts in about a third of the time, which every
 * `harness cp`/`exec` pays. Native addons stay outside the bundle and load from this package's own
 * dependencies (@tether/native-crypto for transport records, @tether/native-pipe for the local backend's
 * child pipes; each has a fallback, node:crypto or socketpairs). ws's optional addons are left out: the
 * harness is a WebSocket client that masks with a zero key (ws then skips masking) and receives unmasked
 * frames, so bufferutil would only cost its load (about 5 ms of a cold start); utf-8-validate has a
 * fallback in Node itself.
 *
 *   node scripts/bundle.mjs [--outdir DIR]
 *
 * DIR defaults to this package's dist/ (the build); scripts/pack.mjs bundles into the staging directory of
 * the packed package instead, so that only this build's chunks are packed.
 */
import { existsSync, readdirSync, rmSync, statSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { build } from 'esbuild';
import { builtinsViaRequire, lazyModules, wsAddonsLeftOut } from './plugins.mjs';

const here = new URL('..', import.meta.url);
const { values } = parseArgs({ options: { outdir: { type: 'string' } } });

// Code reached only through import() (the SDK's dialing machinery: ws, relay frames, secure stream) goes
// to chunks loaded when first used: a command served by a connection master starts without them.
const dist = values.outdir === undefined ? new URL('dist', here).pathname : resolve(values.outdir);
const chunks = join(dist, 'chunks');
const result = await build({
  entryPoints: { main: new URL('src/main.ts', here).pathname },
  outdir: dist,
  splitting: true,
  chunkNames: 'chunks/[name]-[hash]',
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node22',
  conditions: ['tether-source'],
  external: ['@tether/native-crypto', '@tether/native-pipe'],
  // CommonJS dependencies bundled into ESM call require() for Node built-ins and the externals.
  banner: {
    js: "const require = process.getBuiltinModule('node:module').createRequire(import.meta.url);",
  },
  plugins: [builtinsViaRequire, lazyModules, wsAddonsLeftOut],
  legalComments: 'none',
  logLevel: 'warning',
  metafile: true,
});

// Chunks of earlier builds go once they are an hour old: a command or connection master started from an
// earlier build may still load its own chunks for a while (their names carry a content hash).
const current = new Set(Object.keys(result.metafile.outputs).map((file) => relative(dist, file)));
for (const name of existsSync(chunks) ? readdirSync(chunks) : []) {
  const file = join(chunks, name);
  if (!current.has(relative(dist, file)) && Date.now() - statSync(file).mtimeMs > 3_600_000) rmSync(file);
}
