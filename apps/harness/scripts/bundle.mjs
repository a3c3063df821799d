#!/usr/bin/env node
/**
 * Bundles the CLI (src/main.ts and every workspace package it uses, from their TypeScript sources) into
 * one ESM file, dist/main.js. A command's start is then one file to read and compile instead of a few
 * hundred modules to resolve: `harness --help` starts in about a third of the time, which every
 * `harness cp`/`exec` pays. Native addons stay outside the bundle and load from this package's own
 * dependencies (bufferutil for ws, pqclean for ML-KEM, @tether/native-crypto for transport records,
 * @tether/native-pipe for the local backend's child pipes; each has a fallback in JS, node:crypto or
 * socketpairs).
 */
import { build } from 'esbuild';

const here = new URL('..', import.meta.url);
await build({
  entryPoints: [new URL('src/main.ts', here).pathname],
  outfile: new URL('dist/main.js', here).pathname,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  conditions: ['tether-source'],
  external: ['bufferutil', 'utf-8-validate', 'pqclean', '@tether/native-crypto', '@tether/native-pipe'],
  // CommonJS dependencies bundled into ESM call require() for Node built-ins and the externals.
  banner: {
    js: "import { createRequire as __tetherRequire } from 'node:module';\nconst require = __tetherRequire(import.meta.url);",
  },
  legalComments: 'none',
  logLevel: 'warning',
});
