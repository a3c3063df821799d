import {
  closeSync,
  constants,
  fstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  statSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import vm from 'node:vm';
import { crc32 } from 'node:zlib';

/**
 * The CLI runs from one CommonJS bundle (dist/cli-HASH.cjs, scripts/bundle.mjs) compiled through `vm.Script`
 * with a V8 code cache that is written after a command ran, so that it holds the bytecode of every function
 * the command called. Node's compile cache (`module.enableCompileCache`) is written when a module is
 * compiled, before any of it runs: it holds the top-level code only, and each command compiled some 400
 * functions again on every start. With this cache `harness exec -- true` used about a quarter less CPU and
 * a fifth less time, through a master and cold alike (Node 24, farm-bench, 30-40 pairs).
 *
 * A cache belongs to one bundle (its content hash is in the file name), Node version, architecture, the
 * V8 flags a process may carry (execArgv, NODE_OPTIONS) and command (the first argument: each command calls
 * its own code); V8 itself refuses data from another version, flags or source length. It is written
 * after each of the first GENERATIONS runs of a command that got past parsing and connecting (serialising
 * it costs 15-35 ms), each from the one before, so that it gathers the paths those runs took (through a
 * master, directly). It lives in the user's cache directory (`$XDG_CACHE_HOME/tether/code-cache`, else
 * `~/.cache/…`), a directory made 0700; a cache file that is a link, is not the user's or that others may
 * write is not used. V8 checks no more than the length of the data it is given: a CRC-32 of it is kept
 * with it and checked (as Node does for its compile cache; about 2 ms of a start, loading node:zlib and
 * hashing a megabyte), so a cache damaged on disk is ignored, not run. NODE_DISABLE_COMPILE_CACHE=1 (Node's
 * switch) turns it off. A failure to read or write it only costs the speed-up.
 */
export const GENERATIONS = 3;
const MAGIC = 0x31636374; // "tcc1"
const HEADER_BYTES = 12;
/** Another bundle's cache left untouched this long is removed when a cache is written. */
const STALE_MS = 30 * 24 * 3600_000;

/** What the bundle is given besides CommonJS's own: its URL (its `import.meta.url`) and the packages kept outside it. */
export interface BundleContext {
  url: string;
  external: Record<string, unknown>;
}

export interface LoadedBundle<T> {
  exports: T;
  /** Whether a cache was there and V8 took it (`rejected`: another version, flags or source length). */
  cache: 'none' | 'used' | 'rejected';
  /** Writes the cache after a run that called what the command calls (not one cut short by usage errors). */
  save(): void;
}

/** CommonJS's wrapper, strict as the ES modules the bundle is made of (and as the ESM bundle before it ran). */
const WRAPPER = "(function (exports, require, module, __filename, __dirname, __tether) {'use strict';\n";

export function loadBundle<T>(
  file: string,
  command: string,
  external: Record<string, unknown>,
  env: NodeJS.ProcessEnv = process.env,
): LoadedBundle<T> {
  const source = readFileSync(file, 'utf8');
  const cacheFile = env.NODE_DISABLE_COMPILE_CACHE ? null : cachePath(env, file, command);
  const cached = cacheFile === null ? null : readCache(cacheFile);
  const script = new vm.Script(`${WRAPPER}${source}\n})`, {
    filename: file,
    lineOffset: -1,
    ...(cached ? { cachedData: cached.data } : {}),
    importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
  });
  const generation = cached && !script.cachedDataRejected ? cached.generation : 0;
  const module = { exports: {} as T };
  const context: BundleContext = { url: pathToFileURL(file).href, external };
  script.runInThisContext()(module.exports, createRequire(file), module, file, dirname(file), context);
  return {
    exports: module.exports,
    cache: cached === null ? 'none' : script.cachedDataRejected ? 'rejected' : 'used',
    save: () => {
      if (cacheFile !== null && generation < GENERATIONS) writeCache(cacheFile, generation + 1, script);
    },
  };
}

function cachePath(env: NodeJS.ProcessEnv, file: string, command: string): string | null {
  try {
    const base = env.XDG_CACHE_HOME || join(homedir(), '.cache');
    const flags = fnv1a(`${process.execArgv.join('\0')}\0${env.NODE_OPTIONS ?? ''}`);
    const name = /^[a-z][a-z-]{0,15}$/.test(command) ? command : 'other';
    const bundle = file.slice(file.lastIndexOf('/') + 1).replace(/\.cjs$/, '');
    return join(base, 'tether', 'code-cache', `${bundle}.${process.version}-${process.arch}-${flags}.${name}`);
  } catch {
    return null;
  }
}

/** A short hash that keeps caches of different flags apart (V8 checks the flags itself: not a guard). */
function fnv1a(text: string): string {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 0x01000193);
  return (hash >>> 0).toString(16).padStart(8, '0');
}

function readCache(path: string): { generation: number; data: Buffer } | null {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch {
    return null;
  }
  try {
    const stat = fstatSync(fd);
    const uid = process.getuid?.();
    if (!stat.isFile() || (uid !== undefined && stat.uid !== uid) || (stat.mode & 0o022) !== 0) return null;
    const data = readFileSync(fd);
    if (data.length <= HEADER_BYTES || data.readUInt32LE(0) !== MAGIC) return null;
    const payload = data.subarray(HEADER_BYTES);
    if (crc32(payload) !== data.readUInt32LE(8)) return null;
    return { generation: data.readUInt32LE(4), data: payload };
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
}

function writeCache(path: string, generation: number, script: vm.Script): void {
  try {
    const dir = dirname(path);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const payload = script.createCachedData();
    const header = Buffer.alloc(HEADER_BYTES);
    header.writeUInt32LE(MAGIC, 0);
    header.writeUInt32LE(generation, 4);
    header.writeUInt32LE(crc32(payload), 8);
    const temp = `${path}.${process.pid}.tmp`;
    writeFileSync(temp, Buffer.concat([header, payload]), { mode: 0o600, flag: 'wx' });
    renameSync(temp, path);
    removeStale(dir, path.slice(dir.length + 1, path.indexOf('.', dir.length + 1)));
  } catch {
    // No cache: the next start compiles as before.
  }
}

/** Other bundles' caches untouched for STALE_MS (earlier builds and versions). */
function removeStale(dir: string, bundle: string): void {
  const now = Date.now();
  for (const name of readdirSync(dir)) {
    if (name.startsWith(`${bundle}.`)) continue;
    const path = join(dir, name);
    try {
      if (now - statSync(path).mtimeMs > STALE_MS) unlinkSync(path);
    } catch {
      // gone already, or not ours to remove
    }
  }
}
