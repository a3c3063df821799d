/**
 * What the esbuild builds of an app from its TypeScript sources share (apps/executor/scripts/bundle.mjs,
 * apps/harness/scripts/sea.mjs): the one path each requires on its command line, and a plugin that loads every
 * workspace source with the rewrites the build needs.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

/** The value of the build script's `--NAME PATH`, which it requires: without it, the usage line and exit 2. */
export function requiredPath(name, usage) {
  const { values } = parseArgs({ options: { [name]: { type: 'string' } } });
  if (!values[name]) {
    process.stderr.write(`usage: ${usage}\n`);
    process.exit(2);
  }
  return values[name];
}

/**
 * `createRequire(import.meta.url)('NAME')`, a library loaded on first use (telemetry's pino-pretty, user-read's
 * bufferutil): from a bundle it would look for NAME beside the bundle. Written as `require('NAME')`, esbuild
 * bundles NAME (evaluated on that first call, as before) or, for an external, leaves the call to the bundle's
 * require.
 */
const LAZY_REQUIRE = /\bcreateRequire\(import\.meta\.url\)\((['"])([^'"./][^'"]*)\1\)/g;

/**
 * An esbuild plugin that loads each workspace source (apps/X/src/…, packages/X/src/….ts) as
 * `rewrite(path, source)` returns it, with its lazy requires written as require().
 */
export function workspaceSources(name, rewrite) {
  return {
    name,
    setup(build) {
      build.onLoad({ filter: /[\\/](apps|packages)[\\/][^\\/]+[\\/]src[\\/].*\.ts$/ }, (args) => {
        const source = rewrite(args.path, readFileSync(args.path, 'utf8'));
        return { contents: source.replace(LAZY_REQUIRE, 'require($1$2$1)'), loader: 'ts' };
      });
    },
  };
}

/** `source` (of the file at `path`) with `call` replaced by `by`; a source without it fails the build. */
export function replaceCall(path, source, call, by) {
  if (!source.includes(call)) throw new Error(`${path} no longer calls ${call}: update the build script`);
  return source.replace(call, by);
}
