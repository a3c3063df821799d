/**
 * The esbuild plugins of the harness's builds: the bundle (bundle.mjs) and the single executable (sea.mjs).
 */
import { builtinModules } from 'node:module';

/**
 * Node's built-in modules are loaded with require() rather than import: an ESM import of a built-in makes Node
 * build its ESM facade, which reads every export, and on Node 24 one of node:http's exports is a lazy getter
 * that loads all of undici (about 16 ms of every command's start, seen in a --cpu-prof). Through
 * process.getBuiltinModule (Node 22.3+) the module object is used as it is and
 * each export is read when used. (Not require(): esbuild would resolve that call back to this plugin.)
 */
const bareBuiltins = new Set(builtinModules);
/** ws's optional native addons, absent from the bundle: ws's require() of them throws, and ws uses its JS. */
export const wsAddonsLeftOut = {
  name: 'ws-addons-left-out',
  setup(build) {
    build.onResolve({ filter: /^(bufferutil|utf-8-validate)$/ }, (args) => ({
      path: args.path,
      namespace: 'left-out',
    }));
    build.onLoad({ filter: /.*/, namespace: 'left-out' }, (args) => ({
      contents: `throw new Error(${JSON.stringify(`${args.path} is left out of the harness bundle`)});`,
      loader: 'js',
    }));
  },
};
export const builtinsViaRequire = {
  name: 'builtins-via-require',
  setup(build) {
    // commander (15) imports node:util at its top for one function, and loading node:util loads what it
    // re-exports (parseArgs, diff, worker_threads...): 7-10 ms of every command's start on Node 24, measured
    // with farm-bench on `harness --version`. Its import gets that one function, which loads node:util when
    // called (help text only). Another name imported from node:util by commander fails the build here.
    build.onResolve({ filter: /^node:util$/ }, (args) =>
      /[\\/]commander[\\/]/.test(args.importer) ? { path: 'node:util', namespace: 'commander-util' } : undefined,
    );
    build.onLoad({ filter: /.*/, namespace: 'commander-util' }, () => ({
      contents:
        "export const stripVTControlCharacters = (text) => process.getBuiltinModule('node:util').stripVTControlCharacters(text);",
      loader: 'js',
    }));
    build.onResolve({ filter: /^[a-z_/:]+$/ }, (args) => {
      if (!args.path.startsWith('node:') && !bareBuiltins.has(args.path)) return undefined;
      const esm = args.kind === 'import-statement' && !LAZY_BUILTINS.has(args.path.replace(/^node:/, ''));
      return { path: args.path, namespace: esm ? 'builtin-esm' : 'builtin' };
    });
    build.onLoad({ filter: /.*/, namespace: 'builtin-esm' }, (args) => ({
      contents: esmBuiltin(args.path),
      loader: 'js',
    }));
    build.onLoad({ filter: /.*/, namespace: 'builtin' }, (args) => ({
      contents: LAZY_BUILTINS.has(args.path.replace(/^node:/, ''))
        ? lazyBuiltin(args.path)
        : `module.exports = process.getBuiltinModule(${JSON.stringify(args.path)});`,
      loader: 'js',
    }));
  },
};

/**
 * A built-in as an ES module, for `import` statements: the module object as its default export and each of its
 * plain (data) properties as a named export, read once. Through the CommonJS wrapper every importing module got
 * its own copy of all the exports (esbuild's `__toESM`: 49 copies at the harness's start, node:fs's ~100
 * exports 14 times); this way each built-in is one module for the whole bundle. Accessors (lazy exports such as
 * `fs.promises`) are left out, so they are not triggered at start; importing one by name fails the build.
 * Names are those of the building Node's module; one the running Node lacks is undefined, as a property would be.
 */
function esmBuiltin(id) {
  const module = process.getBuiltinModule(id);
  const names = Object.getOwnPropertyNames(module).filter((name) => {
    if (name === 'default' || !/^[A-Za-z_$][\w$]*$/.test(name)) return false;
    if (!('value' in Object.getOwnPropertyDescriptor(module, name))) return false;
    try {
      new Function(`let ${name};`);
      return true;
    } catch {
      return false; // a reserved word
    }
  });
  return `const m = process.getBuiltinModule(${JSON.stringify(id)});
export default m;
export const { ${names.join(', ')} } = m;`;
}

/**
 * Built-ins that a dependency requires at its top but uses only on some paths: ws requires node:tls and
 * node:https for wss:// (about 14 ms of a start, where the relay is ws://) and node:zlib for
 * permessage-deflate (which Tether turns off). Each becomes an object that loads the module on first use.
 */
const LAZY_BUILTINS = new Set(['tls', 'https', 'zlib']);

function lazyBuiltin(id) {
  return `let loaded;
const load = () => (loaded ??= process.getBuiltinModule(${JSON.stringify(id)}));
const configurable = (descriptor) => (descriptor === undefined ? undefined : { ...descriptor, configurable: true });
module.exports = new Proxy({}, {
  get: (_, key) => load()[key],
  has: (_, key) => key in load(),
  ownKeys: () => Reflect.ownKeys(load()),
  getOwnPropertyDescriptor: (_, key) => configurable(Object.getOwnPropertyDescriptor(load(), key)),
});`;
}
