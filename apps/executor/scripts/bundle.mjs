#!/usr/bin/env node
/**
 * Bundles the executor (src/main.ts and every workspace package and third-party library it uses, from the
 * TypeScript sources) into OUTDIR/main.js, and the confined-fs helper it spawns (src/fs/sandbox-helper.ts)
 * into OUTDIR/sandbox-helper.js beside it, where fs/confined.ts looks first. This is what the packed
 * `@tether/executor` ships (scripts/pack.mjs): an install then needs nothing from a registry but the
 * optional native addons. The workspace's own dist/ stays tsc's output.
 *
 *   node scripts/bundle.mjs --outdir DIR
 *
 * Left outside, each loaded at run time from the installed package's node_modules and each optional:
 * - node-pty (PTYs): local-process imports it only when a process asks for a terminal, and says so when it
 *   is missing;
 * - bufferutil and utf-8-validate (ws's and user-read's masking helpers): both fall back to JavaScript;
 * - @tether/native-crypto and @tether/native-pipe: their JavaScript loaders ship as bundled dependencies,
 *   their addons are prebuilt for the packing host and fall back (node:crypto, socketpairs) elsewhere.
 */
import { readFile } from 'node:fs/promises';
import { builtinModules } from 'node:module';
import { parseArgs } from 'node:util';
import { build } from 'esbuild';

const here = new URL('..', import.meta.url);
const { values } = parseArgs({ options: { outdir: { type: 'string' } } });
if (!values.outdir) {
  process.stderr.write('usage: node scripts/bundle.mjs --outdir DIR\n');
  process.exit(2);
}

const EXTERNAL = ['node-pty', 'bufferutil', 'utf-8-validate', '@tether/native-crypto', '@tether/native-pipe'];

/**
 * Two source rewrites, on load, so that the bundle finds at run time only what the package ships:
 * - A module that loads a library on first use with `createRequire(import.meta.url)('NAME')` (telemetry's
 *   pino-pretty, user-read's bufferutil) would look for NAME beside the installed bundle, where only the
 *   externals are. Written as `require('NAME')`, esbuild bundles NAME (evaluated on that first call, as
 *   before) or, for an external, leaves the call to the banner's require.
 * - fs/confined.ts gives the confined helper read access to the code it loads: the helper's own directory
 *   and the directory of @tether/exec-protocol (in the workspace, a sibling package). In the bundle the helper
 *   loads only itself and the package's node_modules, so the package root stands in for that second
 *   directory (import.meta.resolve of a workspace package would fail in an installed copy).
 */
const LAZY_REQUIRE = /\bcreateRequire\(import\.meta\.url\)\((['"])([^'"./][^'"]*)\1\)/g;
const CONFINED = /[\\/]apps[\\/]executor[\\/]src[\\/]fs[\\/]confined\.ts$/;
const sourceRewrites = {
  name: 'source-rewrites',
  setup(build) {
    build.onLoad({ filter: /[\\/](apps|packages)[\\/][^\\/]+[\\/]src[\\/].*\.ts$/ }, async (args) => {
      let source = await readFile(args.path, 'utf8');
      if (CONFINED.test(args.path)) {
        const call = "import.meta.resolve('@tether/exec-protocol')";
        if (!source.includes(call)) throw new Error(`${args.path} no longer calls ${call}: update the bundle script`);
        source = source.replace(call, "new URL('../package.json', import.meta.url).href");
      }
      return { contents: source.replace(LAZY_REQUIRE, 'require($1$2$1)'), loader: 'ts' };
    });
  },
};

await build({
  entryPoints: {
    main: new URL('src/main.ts', here).pathname,
    'sandbox-helper': new URL('src/fs/sandbox-helper.ts', here).pathname,
  },
  outdir: values.outdir,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node22',
  conditions: ['tether-source'],
  external: [...EXTERNAL, ...builtinModules, ...builtinModules.map((name) => `node:${name}`)],
  // CommonJS libraries bundled into ESM (pino, ws, commander) call require() for built-ins and externals.
  banner: {
    js: "import { createRequire as __tetherCreateRequire } from 'node:module'; const require = __tetherCreateRequire(import.meta.url);",
  },
  plugins: [sourceRewrites],
  legalComments: 'none',
  logLevel: 'warning',
});
