import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { GENERATIONS, loadBundle } from './bundle-runner.js';

const work = mkdtempSync(join(tmpdir(), 'harness-bundle-runner-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

let n = 0;
/** A bundle of its own and a cache directory of its own. */
function setUp(
  source = 'module.exports = { answer: (x) => x * 2, url: __tether.url, given: __tether.external.given };',
) {
  const dir = join(work, `case-${++n}`);
  mkdirSync(dir);
  const file = join(dir, 'cli-ABC123.cjs');
  writeFileSync(file, source);
  const env = { XDG_CACHE_HOME: join(dir, 'cache') };
  const cacheDir = join(dir, 'cache', 'tether', 'code-cache');
  type Exports = { answer(x: number): number; url: string; given: unknown };
  const load = (command = 'exec', extra: NodeJS.ProcessEnv = {}) =>
    loadBundle<Exports>(file, command, { given: 'native' }, { ...env, ...extra });
  const cacheFile = (command = 'exec') =>
    join(cacheDir, `cli-ABC123.${process.version}-${process.arch}-${flagsHash()}.${command}`);
  return { file, load, cacheDir, cacheFile };
}

/** The flags part of a cache name in this process (no NODE_OPTIONS given to loadBundle). */
function flagsHash(): string {
  let hash = 0x811c9dc5;
  const text = `${process.execArgv.join('\0')}\0`;
  for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 0x01000193);
  return (hash >>> 0).toString(16).padStart(8, '0');
}

const generation = (path: string) => readFileSync(path).readUInt32LE(4);

describe('the CLI bundle and its code cache', () => {
  it('runs the bundle with its URL and the packages given; the cache is written after a run, then used', () => {
    const { file, load, cacheDir, cacheFile } = setUp();
    const first = load();
    expect(first.cache).toBe('none');
    expect(first.exports.answer(21)).toBe(42);
    expect(first.exports.url).toBe(pathToFileURL(file).href);
    expect(first.exports.given).toBe('native');
    first.save();
    expect(statSync(cacheDir).mode & 0o777).toBe(0o700);
    expect(statSync(cacheFile()).mode & 0o777).toBe(0o600);
    expect(generation(cacheFile())).toBe(1);

    const second = load();
    expect(second.cache).toBe('used');
    expect(second.exports.answer(2)).toBe(4);
    // Another command has a cache of its own.
    expect(load('cp').cache).toBe('none');
  });

  it('is written after the first GENERATIONS runs only, each from the one before', () => {
    const { load, cacheFile } = setUp();
    for (let i = 1; i <= GENERATIONS + 2; i++) {
      const run = load();
      run.exports.answer(i);
      run.save();
      expect(generation(cacheFile())).toBe(Math.min(i, GENERATIONS));
    }
  });

  it('starts again from a cache that is damaged or that V8 refuses, and runs the bundle all the same', () => {
    const { file, load, cacheFile } = setUp();
    for (let i = 0; i < GENERATIONS; i++) load().save();
    const data = readFileSync(cacheFile());
    data[data.length - 100] = (data[data.length - 100] as number) ^ 1;
    writeFileSync(cacheFile(), data);
    const damaged = load();
    expect(damaged.cache).toBe('none');
    expect(damaged.exports.answer(5)).toBe(10);
    damaged.save();
    expect(generation(cacheFile())).toBe(1);
    expect(load().cache).toBe('used');
    // Another source of the same name (V8 checks its length): refused.
    writeFileSync(file, `${readFileSync(file, 'utf8')}\n// and more`);
    const changed = load();
    expect(changed.cache).toBe('rejected');
    expect(changed.exports.answer(6)).toBe(12);
    changed.save();
    expect(generation(cacheFile())).toBe(1);
  });

  it('does not use a cache others may write or that is a link, and none with NODE_DISABLE_COMPILE_CACHE', () => {
    const { load, cacheFile } = setUp();
    load().save();
    chmodSync(cacheFile(), 0o620);
    expect(load().cache).toBe('none');
    chmodSync(cacheFile(), 0o600);
    symlinkSync(cacheFile(), cacheFile('ls'));
    expect(load('ls').cache).toBe('none');
    const off = setUp();
    off.load('exec', { NODE_DISABLE_COMPILE_CACHE: '1' }).save();
    expect(() => statSync(off.cacheFile())).toThrow();
  });

  it('removes caches of other bundles left untouched for 30 days when it writes one', () => {
    const { load, cacheDir, cacheFile } = setUp();
    load().save();
    const old = join(cacheDir, 'cli-OLD.v0-x64-00000000.exec');
    const recent = join(cacheDir, 'cli-RECENT.v0-x64-00000000.exec');
    writeFileSync(old, 'x');
    writeFileSync(recent, 'x');
    const longAgo = new Date(Date.now() - 40 * 24 * 3600_000);
    utimesSync(old, longAgo, longAgo);
    utimesSync(cacheFile(), longAgo, longAgo);
    load('cp').save();
    expect(() => statSync(old)).toThrow();
    expect(statSync(recent).isFile()).toBe(true);
    expect(statSync(cacheFile()).isFile()).toBe(true);
  });
});
