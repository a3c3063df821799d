import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';

const packageDir = new URL('..', import.meta.url).pathname;
const script = join(packageDir, 'scripts', 'build-native.mjs');
const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** Runs the build script on a copy of native/ (the package's own addon stays as it is). */
function build(env: Record<string, string>) {
  const dir = mkdtempSync(join(tmpdir(), 'tether-native-pipe-build-'));
  dirs.push(dir);
  cpSync(join(packageDir, 'native'), join(dir, 'native'), {
    recursive: true,
    filter: (src) => !src.includes('/build'),
  });
  const result = spawnSync(process.execPath, [script, dir], { env: { ...process.env, ...env }, encoding: 'utf8' });
  return { ...result, built: existsSync(join(dir, 'native', 'build', 'Release', 'tether_pipe.node')) };
}

describe('build-native.mjs', () => {
  it('builds the addon against the given headers', () => {
    const result = build({ npm_config_nodedir: join(process.execPath, '..', '..'), TETHER_NATIVE_PIPE: '' });
    expect(result.status).toBe(0);
    expect(result.built).toBe(true);
  }, 120_000);

  it('without usable headers warns and succeeds, unless TETHER_NATIVE_PIPE=require', () => {
    const missing = join(tmpdir(), 'tether-no-such-node-headers');
    const lenient = build({ npm_config_nodedir: missing, TETHER_NATIVE_PIPE: '' });
    expect(lenient.status).toBe(0);
    expect(lenient.built).toBe(false);
    expect(lenient.stderr).toContain('warning: @tether/native-pipe: the pipe addon was not built');
    const strict = build({ npm_config_nodedir: missing, TETHER_NATIVE_PIPE: 'require' });
    expect(strict.status).toBe(1);
    expect(strict.built).toBe(false);
    expect(strict.stderr).toContain('the pipe addon was not built');
    expect(strict.stderr).not.toContain('warning:');
  }, 120_000);
});
