#!/usr/bin/env node
/**
 * Bundles the executor (src/main.ts and every workspace package and third-party library it uses, from the
 * TypeScript sources) into OUTDIR/main.js, and beside it the confined-fs helper it spawns (src/fs/sandbox-helper.ts,
 * where fs/confined.ts looks first), the managed proxy's sandbox relay (src/proxy-relay.ts) and the recording worker
 * (src/recording-worker.ts), and the sandbox's walk thread (@tether/sandbox's walk-worker.ts). This is what the packed
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
import { builtinModules } from 'node:module';
import { build } from 'esbuild';
import { replaceCall, requiredPath, workspaceSources } from '../../../scripts/bundle-sources.mjs';

const here = new URL('..', import.meta.url);
const outdir = requiredPath('outdir', 'node scripts/bundle.mjs --outdir DIR');

const EXTERNAL = ['node-pty', 'bufferutil', 'utf-8-validate', '@tether/native-crypto', '@tether/native-pipe'];

/**
 * Source rewrites, on load, so that the bundle finds at run time only what the package ships: a library loaded
 * on first use is bundled (workspaceSources), and fs/confined.ts gives the confined helper read access to the
 * code it loads: the helper's own directory and the directory of @tether/exec-protocol (in the workspace, a
 * sibling package). In the bundle the helper loads only itself and the package's node_modules, so the package
 * root stands in for that second directory (import.meta.resolve of a workspace package would fail in an
 * installed copy).
 */
const CONFINED = /[\\/]apps[\\/]executor[\\/]src[\\/]fs[\\/]confined\.ts$/;
const sourceRewrites = workspaceSources('source-rewrites', (path, source) =>
  CONFINED.test(path)
    ? replaceCall(
        path,
        source,
        "import.meta.resolve('@tether/exec-protocol')",
        "new URL('../package.json', import.meta.url).href",
      )
    : source,
);

await build({
  entryPoints: {
    main: new URL('src/main.ts', here).pathname,
    'sandbox-helper': new URL('src/fs/sandbox-helper.ts', here).pathname,
    // Found beside main.js: the managed proxy's relay a sandboxed command runs behind (handlers/process.ts), and
    // the thread that writes session recordings (recordings.ts).
    'proxy-relay': new URL('src/proxy-relay.ts', here).pathname,
    'recording-worker': new URL('src/recording-worker.ts', here).pathname,
    // …and the sandbox's walk thread (@tether/sandbox's walk-thread.ts looks beside the module that runs it).
    'walk-worker': new URL('../../packages/sandbox/src/walk-worker.ts', here).pathname,
  },
  outdir,
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
