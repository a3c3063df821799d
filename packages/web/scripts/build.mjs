#!/usr/bin/env node
/**
 * Builds the page into dist/: index.html, app.js (one ES module: the page, xterm.js and the client SDK from
 * the workspace's TypeScript sources), app.css (xterm's and the page's) and a source map. The output is
 * static: the registry serves it at /ui, and any static host can.
 *
 * The SDK is shared with the harness CLI. Where its modules import Node built-ins for paths a page never
 * takes (local processes, stdio executors, TCP forwards, ws), those resolve to src/shims; the globals it
 * names (Buffer, process, setImmediate) come from src/shims/globals.ts. The build lists every built-in that
 * was stood in for and fails on one it does not know, so a new Node dependency of the browser path is seen.
 *
 *   node scripts/build.mjs [--outdir DIR]
 */
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { build } from 'esbuild';

const here = new URL('..', import.meta.url).pathname;
const { values } = parseArgs({ options: { outdir: { type: 'string' } } });
const dist = values.outdir === undefined ? join(here, 'dist') : resolve(values.outdir);
const shims = join(here, 'src/shims');
const require = createRequire(import.meta.url);

/** Built-ins the SDK imports on paths a page does not take. Anything else is a build error. */
const ABSENT = new Set([
  'node:child_process',
  'node:events',
  'node:fs',
  'node:fs/promises',
  'node:http',
  'node:module',
  'node:https',
  'node:net',
  'node:os',
  'node:path',
  'node:stream',
  'node:stream/promises',
  'node:string_decoder',
  'node:tls',
  'node:url',
  'node:util',
  'node:zlib',
  'ws',
  'https-proxy-agent',
  'bufferutil',
  'utf-8-validate',
  '@tether/native-crypto',
  '@tether/native-pipe',
  '@tether/local-process',
]);
const STANDS_IN = new Map([
  ['node:buffer', join(shims, 'node-buffer.ts')],
  ['node:crypto', join(shims, 'node-crypto.cjs')],
]);

/**
 * An absent module as an ES module with exactly the names its importer asks for, each a function that throws
 * when called or constructed (a class may still extend one at load time, as Node stream classes are).
 */
function absentModule(name, importer) {
  const source = readFileSync(importer, 'utf8');
  const names = new Set();
  const quoted = name.replace(/[/.*+?^${}()|[\]\\]/g, '\\$&');
  const named = new RegExp(
    `(?:import|export)\\s+(?:type\\s+)?(?:[\\w$]+\\s*,\\s*)?\\{([^}]*)\\}\\s*from\\s*['"]${quoted}['"]`,
    'g',
  );
  for (const match of source.matchAll(named)) {
    for (const part of match[1].split(',')) {
      const spec = part.trim().replace(/^type\s+/, '');
      if (spec === '' || part.trim().startsWith('type ')) continue;
      names.add(spec.split(/\s+as\s+/)[0].trim());
    }
  }
  const star = new RegExp(`import\\s+\\*\\s+as\\s+([\\w$]+)\\s+from\\s*['"]${quoted}['"]`, 'g');
  for (const [, namespace] of source.matchAll(star)) {
    for (const [, member] of source.matchAll(new RegExp(`\\b${namespace}\\.([\\w$]+)`, 'g'))) names.add(member);
  }
  const lines = [
    'function unavailable(name) {',
    `  return function () { throw new Error(name + ' (${name}) is not available in a browser'); };`,
    '}',
    `export default unavailable('default');`,
  ];
  for (const exported of names)
    if (exported !== 'default') lines.push(`export const ${exported} = unavailable('${exported}');`);
  return lines.join('\n');
}

const stoodIn = new Set();
const nodeOnly = {
  name: 'node-only',
  setup(b) {
    b.onResolve(
      { filter: /^(node:|ws$|https-proxy-agent$|bufferutil$|utf-8-validate$|@tether\/(native-|local-process))/ },
      (args) => {
        const name = args.path.replace(/^(@tether\/[^/]+).*$/, '$1');
        if (name !== args.path && !ABSENT.has(name)) return undefined;
        stoodIn.add(name);
        const target = STANDS_IN.get(name);
        if (target) return { path: target };
        if (ABSENT.has(name))
          // One module per importer: each gets the names it imports.
          return { path: `${name}|${args.importer}`, namespace: 'absent' };
        return {
          errors: [
            {
              text: `${args.path} (from ${args.importer}) has no browser stand-in: add one or keep it off the page's path`,
            },
          ],
        };
      },
    );
    b.onLoad({ filter: /.*/, namespace: 'absent' }, (args) => ({
      contents: absentModule(args.path.slice(0, args.path.indexOf('|')), args.path.slice(args.path.indexOf('|') + 1)),
      loader: 'js',
    }));
  },
};

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
  inject: [join(shims, 'globals.ts')],
  plugins: [nodeOnly],
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
console.log(
  `web: dist/ (${Math.round(bytes / 1024)} KiB of JavaScript); stood in for ${[...stoodIn].sort().join(', ') || 'nothing'}`,
);
