import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileUri } from '@tether/exec-protocol';
import { parse } from 'smol-toml';
import { afterEach, describe, expect, it } from 'vitest';
import { readEnvironmentConfig } from './environment-config.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function scratch(): { system: string; home: string } {
  const root = mkdtempSync(join(tmpdir(), 'executor-envconfig-'));
  dirs.push(root);
  const system = join(root, 'etc-codex');
  const home = join(root, 'codex-home');
  mkdirSync(system);
  mkdirSync(home);
  return { system, home };
}

describe('readEnvironmentConfig', () => {
  // As codex 0.171.0 answered with /etc/codex/config.toml and requirements.toml present (CODEX-FINDINGS.md §18).
  it('puts the system layer first, counts it as the cloud insertion index, and reads requirements.toml', () => {
    const { system, home } = scratch();
    writeFileSync(join(system, 'config.toml'), 'model = "sys-model"\n');
    writeFileSync(join(system, 'requirements.toml'), 'allowed_sandbox_modes = ["read-only"]\nother = 1\n');
    writeFileSync(join(home, 'config.toml'), 'model = "user-model"\n');
    const result = readEnvironmentConfig(
      { cwd: 'file:///', configPaths: [['model']], requirementsPaths: [['allowed_sandbox_modes']] },
      { env: { CODEX_HOME: home }, systemDir: system },
    );
    expect(result.config.cloudInsertionIndex).toBe(1);
    expect(result.config.layers.map((layer) => [layer.source, layer.baseDir, parse(layer.toml)])).toEqual([
      [`system (${join(system, 'config.toml')})`, pathToFileUri(system), { model: 'sys-model' }],
      [`user (${join(home, 'config.toml')})`, pathToFileUri(home), { model: 'user-model' }],
    ]);
    // As Codex writes a one-key layer, to the byte.
    expect(result.config.layers[0]?.toml).toBe('model = "sys-model"\n');
    expect(result.requirements.cloudInsertionIndex).toBe(1);
    expect(result.requirements.layers.map((layer) => [layer.source, parse(layer.toml)])).toEqual([
      [join(system, 'requirements.toml'), { allowed_sandbox_modes: ['read-only'] }],
    ]);
  });

  it('finds the project root by .git and reads each .codex from it down to cwd when the root is trusted', () => {
    const { system, home } = scratch();
    const root = join(home, '..', 'repo');
    mkdirSync(join(root, '.git'), { recursive: true });
    mkdirSync(join(root, '.codex'));
    mkdirSync(join(root, 'sub', '.codex'), { recursive: true });
    writeFileSync(join(root, '.codex', 'config.toml'), 'model = "root"\n');
    writeFileSync(join(root, 'sub', '.codex', 'config.toml'), 'model = "sub"\n');
    writeFileSync(join(home, 'config.toml'), `[projects.${JSON.stringify(root)}]\ntrust_level = "trusted"\n`);
    const read = (cwd: string) =>
      readEnvironmentConfig(
        { cwd: pathToFileUri(cwd), configPaths: [['model']], requirementsPaths: [] },
        { env: { CODEX_HOME: home }, systemDir: system },
      ).config.layers.map((layer) => parse(layer.toml).model);
    expect(read(join(root, 'sub'))).toEqual(['root', 'sub']);
    writeFileSync(join(home, 'config.toml'), `[projects.${JSON.stringify(root)}]\ntrust_level = "untrusted"\n`);
    expect(read(join(root, 'sub'))).toEqual([]);
  });

  it('treats __proto__ in a path as a key, never as the prototype', () => {
    const { system, home } = scratch();
    writeFileSync(join(home, 'config.toml'), '[__proto__]\npolluted = "yes"\n');
    const result = readEnvironmentConfig(
      { cwd: 'file:///', configPaths: [['__proto__', 'polluted']], requirementsPaths: [] },
      { env: { CODEX_HOME: home }, systemDir: system },
    );
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(result.config.layers.length).toBeLessThanOrEqual(1);
  });

  it('refuses a config file above 1 MiB', () => {
    const { system, home } = scratch();
    writeFileSync(join(home, 'config.toml'), `model = "${'x'.repeat(1024 * 1024)}"\n`);
    expect(() =>
      readEnvironmentConfig(
        { cwd: 'file:///', configPaths: [['model']], requirementsPaths: [] },
        { env: { CODEX_HOME: home }, systemDir: system },
      ),
    ).toThrow(/is larger than 1048576 bytes/);
  });

  it('refuses a config file that does not parse, naming it', () => {
    const { system, home } = scratch();
    writeFileSync(join(home, 'config.toml'), 'model = \n');
    expect(() =>
      readEnvironmentConfig(
        { cwd: 'file:///', configPaths: [['model']], requirementsPaths: [] },
        { env: { CODEX_HOME: home }, systemDir: system },
      ),
    ).toThrow(/failed to parse .*config\.toml/);
  });
});
