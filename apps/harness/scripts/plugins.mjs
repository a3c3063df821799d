/**
 * The esbuild plugins of the harness's builds: the bundle (bundle.mjs) and the single executable (sea.mjs).
 */
import { builtinModules } from 'node:module';
import { dirname } from 'node:path';

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
      contents: LAZY_ESM_BUILTINS.has(args.path.replace(/^node:/, ''))
        ? lazyEsmBuiltin(args.path)
        : esmBuiltin(args.path),
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
  return `const m = process.getBuiltinModule(${JSON.stringify(id)});
export default m;
export const { ${exportNames(id).join(', ')} } = m;`;
}

/** The names `esmBuiltin` exports: the building Node's data properties of the module that are identifiers. */
function exportNames(id) {
  const module = process.getBuiltinModule(id);
  return Object.getOwnPropertyNames(module).filter((name) => {
    if (name === 'default' || !/^[A-Za-z_$][\w$]*$/.test(name)) return false;
    if (!('value' in Object.getOwnPropertyDescriptor(module, name))) return false;
    try {
      new Function(`let ${name};`);
      return true;
    } catch {
      return false; // a reserved word
    }
  });
}

/**
 * Built-ins that modules import at their top but that a command may never call: node:crypto takes about 10 ms
 * to load (its JS and OpenSSL's tables), and a command served by a connection master makes no key, cipher or
 * hash. Each export is a live binding that holds, until the module loads, a stand-in: a function export's calls
 * it (or `new`) load the module, set every binding to the real export and go on with the real one; any other
 * value is an object that loads the module when read. Nothing that the module makes can exist before a call
 * has loaded it, so an `instanceof` against a stand-in class answers false rightly. A name the running Node
 * lacks becomes undefined once loaded, as with `esmBuiltin`.
 */
const LAZY_ESM_BUILTINS = new Set(['crypto', 'child_process', 'fs/promises']);

function lazyEsmBuiltin(id) {
  const module = process.getBuiltinModule(id);
  const names = exportNames(id);
  const standIn = (name) =>
    typeof module[name] === 'function'
      ? `function (...args) {
  load();
  return new.target ? Reflect.construct(${name}, args) : ${name}.apply(this, args);
}`
      : `lazyObject(() => load().${name})`;
  return `let loaded;
const configurable = (descriptor) => (descriptor === undefined ? undefined : { ...descriptor, configurable: true });
const lazyObject = (get) => new Proxy({}, {
  get: (_, key) => get()[key],
  has: (_, key) => key in get(),
  ownKeys: () => Reflect.ownKeys(get()),
  getOwnPropertyDescriptor: (_, key) => configurable(Object.getOwnPropertyDescriptor(get(), key)),
});
function load() {
  if (loaded) return loaded;
  loaded = process.getBuiltinModule(${JSON.stringify(id)});
  ${names.map((name) => `${name} = loaded.${name};`).join('\n  ')}
  return loaded;
}
export default lazyObject(load);
${names.map((name) => `export let ${name} = ${standIn(name)};`).join('\n')}`;
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

/**
 * Dependencies whose module does real work when it loads and that a command needs only on some paths, with
 * the exports used from them: @noble/post-quantum's ML-KEM builds its NTT tables at load (BigInt powers, about
 * 3 ms of every command's start on Node 24, which never uses it: ML-KEM is node:crypto's there; noble serves
 * Node 22, injected randomness, and the 2400-byte secret-key form). Each listed export becomes an object that
 * loads the module on first use: the module is bundled behind esbuild's lazy initialiser (it is reached
 * through require()), so it is compiled with the rest and evaluated only then. An import of another name
 * from it fails the build.
 */
const LAZY_MODULES = new Map([['@noble/post-quantum/ml-kem.js', ['ml_kem768']]]);

export const lazyModules = {
  name: 'lazy-modules',
  setup(build) {
    const specifiers = [...LAZY_MODULES.keys()].map((name) => name.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&'));
    build.onResolve({ filter: new RegExp(`^(${specifiers.join('|')})$`) }, async (args) => {
      // The shim's own require() and the resolve below (which runs the plugins again) get the real module.
      if (args.namespace === 'lazy-module' || args.pluginData?.real) return undefined;
      const real = await build.resolve(args.path, {
        kind: args.kind,
        importer: args.importer,
        resolveDir: args.resolveDir,
        pluginData: { real: true },
      });
      if (real.errors.length > 0) return { errors: real.errors };
      return { path: real.path, namespace: 'lazy-module', pluginData: { names: LAZY_MODULES.get(args.path) } };
    });
    build.onLoad({ filter: /.*/, namespace: 'lazy-module' }, (args) => ({
      contents: lazyModule(args.path, args.pluginData.names),
      loader: 'js',
      resolveDir: dirname(args.path),
    }));
  },
};

function lazyModule(path, names) {
  return `let module;
const load = (name) => (module ??= require(${JSON.stringify(path)}))[name];
const configurable = (descriptor) => (descriptor === undefined ? undefined : { ...descriptor, configurable: true });
const lazy = (name) => new Proxy({}, {
  get: (_, key) => load(name)[key],
  has: (_, key) => key in load(name),
  ownKeys: () => Reflect.ownKeys(load(name)),
  getOwnPropertyDescriptor: (_, key) => configurable(Object.getOwnPropertyDescriptor(load(name), key)),
});
${names.map((name) => `export const ${name} = lazy(${JSON.stringify(name)});`).join('\n')}`;
}
