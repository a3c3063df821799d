import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { configPath, loadConfig, readApiKeyFile, saveConfig, selectContext } from './config.js';

const dir = mkdtempSync(join(tmpdir(), 'tether-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('config file', () => {
  it('is found at TETHER_CONFIG, else XDG_CONFIG_HOME, else ~/.config', () => {
    expect(configPath({ TETHER_CONFIG: '/etc/t.toml', XDG_CONFIG_HOME: '/x', HOME: '/h' })).toBe('/etc/t.toml');
    expect(configPath({ XDG_CONFIG_HOME: '/x', HOME: '/h' })).toBe('/x/tether/config.toml');
    // A relative XDG_CONFIG_HOME is ignored, as the XDG spec says.
    expect(configPath({ XDG_CONFIG_HOME: 'rel', HOME: '/h' })).toBe('/h/.config/tether/config.toml');
  });

  it('round-trips, written atomically with mode 0600 and nothing left beside it', () => {
    const file = join(dir, 'a', 'config.toml');
    expect(loadConfig(file)).toEqual({ contexts: {} });
    const config = {
      currentContext: 'dev',
      contexts: { dev: { registry: 'https://r.example', environment: 'e1', apiKeyFile: '/k' }, 'b.2': {} },
    };
    const umask = process.umask(0);
    try {
      saveConfig(file, config);
    } finally {
      process.umask(umask);
    }
    expect(loadConfig(file)).toEqual(config);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(readdirSync(join(dir, 'a'))).toEqual(['config.toml']);
    expect(readFileSync(file, 'utf8')).toContain('[contexts.dev]\nregistry = "https://r.example"');
    chmodSync(file, 0o644);
    saveConfig(file, { contexts: {} });
    expect(statSync(file).mode & 0o777).toBe(0o600);
  });

  it('selects --context, else current-context; expands ~/ in paths; names a missing context', () => {
    const config = {
      currentContext: 'a',
      contexts: { a: { environment: 'ea' }, b: { apiKeyFile: '~/k/key' } },
    };
    const env = { HOME: '/home/u' };
    expect(selectContext(config, undefined, 'f', env)).toEqual({ name: 'a', context: { environment: 'ea' } });
    expect(selectContext(config, 'b', 'f', env)).toEqual({ name: 'b', context: { apiKeyFile: '/home/u/k/key' } });
    expect(selectContext({ contexts: {} }, undefined, 'f', env)).toBeNull();
    expect(() => selectContext(config, 'c', 'f', env)).toThrow('no context "c" in f (known: a, b)');
  });

  it('refuses a file over 1 MiB', () => {
    const file = join(dir, 'big.toml');
    writeFileSync(file, `# ${'x'.repeat(1024 * 1024)}\n`);
    expect(() => loadConfig(file)).toThrow('is over 1048576 bytes');
  });
});

describe('API key file', () => {
  it('reads the first line of a file only its owner may read', () => {
    const file = join(dir, 'key');
    writeFileSync(file, '  treg_abc  \nignored\n', { mode: 0o600 });
    expect(readApiKeyFile(file)).toBe('treg_abc');
    chmodSync(file, 0o400);
    expect(readApiKeyFile(file)).toBe('treg_abc');
  });

  it('refuses group or world permission bits, an empty file, a directory and an oversized file', () => {
    const file = join(dir, 'open-key');
    writeFileSync(file, 'treg_secret\n');
    for (const mode of [0o640, 0o604, 0o660, 0o602]) {
      chmodSync(file, mode);
      expect(() => readApiKeyFile(file)).toThrow(
        `permissions 0${mode.toString(8)} for the API key file ${file} are too open`,
      );
    }
    writeFileSync(join(dir, 'empty-key'), '\n', { mode: 0o600 });
    expect(() => readApiKeyFile(join(dir, 'empty-key'))).toThrow('is empty');
    expect(() => readApiKeyFile(dir)).toThrow('not a regular file');
    writeFileSync(join(dir, 'huge-key'), 'k'.repeat(5000), { mode: 0o600 });
    expect(() => readApiKeyFile(join(dir, 'huge-key'))).toThrow('is over 4096 bytes');
  });
});
