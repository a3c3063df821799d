#!/usr/bin/env node
/**
 * Bundles the CLI (src/main.ts and every workspace package it uses, from their TypeScript sources) into
 * one ESM file, dist/main.js. A command's start is then one file to read and compile instead of a few
 * hundred modules to resolve: `harness --help` starts in about a third of the time, which every
 * `harness cp`/`exec` pays. Native addons stay outside the bundle and load from this package's own
 * dependencies (bufferutil for ws, @tether/native-crypto for transport records,
 * @tether/native-pipe for the local backend's child pipes; each has a fallback in JS, node:crypto or
 * socketpairs).
 */
import { readdirSync, rmSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { build } from 'esbuild';

const here = new URL('..', import.meta.url);
// Code reached only through import() (the SDK's dialing machinery: ws, relay frames, secure stream) goes
// to chunks loaded when first used: a command served by a connection master starts without them.
const dist = new URL('dist', here).pathname;
const chunks = join(dist, 'chunks');
const result = await build({
  entryPoints: { main: new URL('src/main.ts', here).pathname },
  outdir: new URL('dist', here).pathname,
  splitting: true,
  chunkNames: 'chunks/[name]-[hash]',
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  conditions: ['tether-source'],
  external: ['bufferutil', 'utf-8-validate', '@tether/native-crypto', '@tether/native-pipe'],
  // CommonJS dependencies bundled into ESM call require() for Node built-ins and the externals.
  banner: {
    js: "import { createRequire as __tetherRequire } from 'node:module';\nconst require = __tetherRequire(import.meta.url);",
  },
  legalComments: 'none',
  logLevel: 'warning',
  metafile: true,
});

// Chunks of earlier builds go once they are an hour old: a command or connection master started from an
// earlier build may still load its own chunks for a while (their names carry a content hash).
const current = new Set(Object.keys(result.metafile.outputs).map((file) => relative(dist, file)));
for (const name of readdirSync(chunks)) {
  const file = join(chunks, name);
  if (!current.has(relative(dist, file)) && Date.now() - statSync(file).mtimeMs > 3_600_000) rmSync(file);
}
