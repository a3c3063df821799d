/**
 * Each native addon's build script (scripts/build-native.mjs of native-crypto and native-pipe, over the shared
 * scripts/build-native-addon.mjs): it builds against the given Node headers; without usable headers it warns
 * and succeeds (the JavaScript fallback serves), unless the addon's variable says `require`.
 */

import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from '@tether/test-kit';
import { afterEach, describe, expect, it } from 'vitest';

const ADDONS = [
  { name: 'native-crypto', file: 'tether_crypto.node', variable: 'TETHER_NATIVE_CRYPTO', what: 'the native AEAD' },
  { name: 'native-pipe', file: 'tether_pipe.node', variable: 'TETHER_NATIVE_PIPE', what: 'the pipe addon' },
];

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe.each(ADDONS)('@tether/$name build-native.mjs', ({ name, file, variable, what }) => {
  const packageDir = join(repoRoot(), 'packages', name);

  /** Runs the build script on a copy of native/ (the package's own addon stays as it is). */
  function build(env: Record<string, string>) {
    const dir = mkdtempSync(join(tmpdir(), `tether-${name}-build-`));
    dirs.push(dir);
    cpSync(join(packageDir, 'native'), join(dir, 'native'), {
      recursive: true,
      filter: (src) => !src.includes('/build'),
    });
    const script = join(packageDir, 'scripts', 'build-native.mjs');
    const result = spawnSync(process.execPath, [script, dir], { env: { ...process.env, ...env }, encoding: 'utf8' });
    return { ...result, built: existsSync(join(dir, 'native', 'build', 'Release', file)) };
  }

  it('builds the addon against the given headers', () => {
    const result = build({ npm_config_nodedir: join(process.execPath, '..', '..'), [variable]: '' });
    expect(result.status).toBe(0);
    expect(result.built).toBe(true);
  }, 120_000);

  it(`without usable headers warns and succeeds, unless ${variable}=require`, () => {
    const missing = join(tmpdir(), 'tether-no-such-node-headers');
    const lenient = build({ npm_config_nodedir: missing, [variable]: '' });
    expect(lenient.status).toBe(0);
    expect(lenient.built).toBe(false);
    expect(lenient.stderr).toContain(`warning: @tether/${name}: ${what} was not built`);
    const strict = build({ npm_config_nodedir: missing, [variable]: 'require' });
    expect(strict.status).toBe(1);
    expect(strict.built).toBe(false);
    expect(strict.stderr).toContain(`${what} was not built`);
    expect(strict.stderr).not.toContain('warning:');
  }, 120_000);
});
