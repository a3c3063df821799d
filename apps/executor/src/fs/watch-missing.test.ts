import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileUri } from '@tether/exec-protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { MAX_WATCHED_PATHS, MissingWatch } from './watch-missing.js';

const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

function setUp() {
  const dir = mkdtempSync(join(tmpdir(), 'executor-watch-'));
  const fired: number[] = [];
  const watch = new MissingWatch((watchId) => fired.push(watchId));
  cleanups.push(() => {
    watch.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { dir, fired, watch };
}

describe('MissingWatch', () => {
  it(`refuses more than ${MAX_WATCHED_PATHS} paths in one watch, and takes no id for it`, () => {
    const { dir, watch } = setUp();
    const paths = (n: number) => Array.from({ length: n }, (_, i) => pathToFileUri(join(dir, `m${i}`)));
    expect(() => watch.watch({ watchId: 1, missing: paths(MAX_WATCHED_PATHS + 1) })).toThrow(/at most 256 paths/);
    expect(watch.watch({ watchId: 1, missing: paths(MAX_WATCHED_PATHS) })).toEqual({ watching: true });
  });

  it('fires nothing once closed, and answers false after', async () => {
    const { dir, fired, watch } = setUp();
    expect(watch.watch({ watchId: 1, missing: [pathToFileUri(join(dir, 'a'))] })).toEqual({ watching: true });
    watch.close();
    writeFileSync(join(dir, 'a'), 'x');
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(fired).toEqual([]);
    expect(watch.watch({ watchId: 2, missing: [pathToFileUri(join(dir, 'b'))] })).toEqual({ watching: false });
  });

  it('answers false for a file URI of another host', () => {
    const { watch } = setUp();
    expect(watch.watch({ watchId: 1, missing: ['file://elsewhere/tmp/x'] })).toEqual({ watching: false });
  });
});
