#!/usr/bin/env node
/**
 * Builds the page into dist/: index.html, app.js (one ES module: the page, xterm.js and the client SDK from
 * the workspace's TypeScript sources), app.css (xterm's and the page's) and a source map. The output is
 * static: the registry serves it at /ui, and any static host can.
 *
 * The SDK is shared with the harness CLI: the page imports its browser entry (`@tether/client/browser`), and
 * esbuild's `browser` condition picks the browser entries of the packages under it (noise, jsonrpc,
 * exec-protocol, secure-stream), whose graphs hold nothing of Node. The build fails on any Node-only import
 * that still reaches the bundle, naming its importer (scripts/node-only.mjs). The globals the shared code
 * names (Buffer, process, setImmediate) come from src/shims/globals.ts.
 *
 *   node scripts/build.mjs [--outdir DIR]
 */
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { build } from 'esbuild';
import { nodeOnlyGuard } from './node-only.mjs';

const here = new URL('..', import.meta.url).pathname;
const { values } = parseArgs({ options: { outdir: { type: 'string' } } });
const dist = values.outdir === undefined ? join(here, 'dist') : resolve(values.outdir);
const require = createRequire(import.meta.url);
const root = resolve(here, '../..');

rmSync(dist, { recursive: true, force: true });
mkdirSync(dist, { recursive: true });
const result = await build({
  entryPoints: { app: join(here, 'src/app.ts') },
  outdir: dist,
  bundle: true,
  platform: 'browser',
  format: 'esm',
  target: ['chrome120', 'firefox120', 'safari17'],
  conditions: ['tether-source'],
  inject: [join(here, 'src/shims/globals.ts')],
  plugins: [nodeOnlyGuard(root)],
  minify: true,
  sourcemap: 'linked',
  legalComments: 'linked',
  logLevel: 'warning',
  metafile: true,
});

const xtermCss = readFileSync(join(dirname(require.resolve('@xterm/xterm/package.json')), 'css/xterm.css'), 'utf8');
writeFileSync(join(dist, 'app.css'), `${xtermCss}\n${readFileSync(join(here, 'static/app.css'), 'utf8')}`);
for (const file of ['index.html', 'favicon.svg']) copyFileSync(join(here, 'static', file), join(dist, file));

const bytes = Object.entries(result.metafile.outputs)
  .filter(([file]) => file.endsWith('.js'))
  .reduce((sum, [, output]) => sum + output.bytes, 0);
console.log(`web: dist/ (${Math.round(bytes / 1024)} KiB of JavaScript), nothing of Node in it`);
