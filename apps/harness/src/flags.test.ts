/**
 * The flag and variable scheme on the built harness (bin/harness.js → the esbuild bundle in dist).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { envVarName, flagRows } from '@tether/telemetry/cli';
import { afterAll, describe, expect, it } from 'vitest';
import { buildProgram, HARNESS_ENV } from './cli.js';

const APP_DIR = join(import.meta.dirname, '..');
const BIN = join(APP_DIR, 'bin', 'harness.js');
const dir = mkdtempSync(join(tmpdir(), 'harness-flags-'));

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The built harness with only these variables of ours (and a config file of its own). */
function harness(args: string[], extra: Record<string, string> = {}) {
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('TETHER_')));
  return spawnSync(process.execPath, [BIN, ...args], {
    encoding: 'utf8',
    env: { ...env, TETHER_CONFIG: join(dir, 'config.toml'), ...extra },
  });
}

describe('harness flags and variables', () => {
  it('every long flag has its TETHER_HARNESS_ variable, but where writing the config file, internal, or named apart', () => {
    const quiet = { write: () => true };
    const rows = flagRows(
      buildProgram({ stdin: process.stdin, stdout: quiet, stderr: quiet, env: {} } as never, () => {}),
    );
    expect(rows.find((r) => r.variable === 'TETHER_HARNESS_API_KEY')).toMatchObject({
      deprecated: ['TETHER_API_KEY'],
      secret: true,
    });
    expect(rows.find((r) => r.flag.startsWith('--environment-id') && r.variable === null)?.deprecated).toEqual([
      '--environment',
    ]);
    for (const row of rows.filter((r) => r.flag !== '')) {
      const long = /--[a-z0-9-]+/.exec(row.flag)?.[0] as string;
      if (row.commands.every((c) => c === 'config set-context' || c === 'master serve')) {
        expect(row.variable, row.flag).toBeNull();
        continue;
      }
      if (long === '--token') {
        // attach's share token has one variable, named for what it holds, not the flag's TETHER_HARNESS_TOKEN.
        expect([row.variable, row.secret]).toEqual([null, true]);
        continue;
      }
      expect(row.variable, row.flag).toBe(long === '--version' ? null : envVarName(HARNESS_ENV.app, long));
    }
    expect(rows.find((r) => r.flag.startsWith('--connect-timeout'))?.deprecated).toEqual(['TETHER_CONNECT_TIMEOUT']);
    expect(rows.find((r) => r.variable === 'TETHER_HARNESS_SHARE_TOKEN')).toMatchObject({
      commands: ['attach'],
      secret: true,
    });
  });

  it('--version prints package.json’s version, from the bundle', () => {
    const version = (JSON.parse(readFileSync(join(APP_DIR, 'package.json'), 'utf8')) as { version: string }).version;
    const result = harness(['--version']);
    expect(result.status).toBe(0);
    expect(result.stdout).toBe(`${version}\n`);
  });

  it('honours variables, and a flag beats its variable', () => {
    const output = harness(['config', 'get-contexts'], { TETHER_HARNESS_OUTPUT: 'yaml' });
    expect(output.status).toBe(2);
    expect(output.stderr).toContain('--output must be "name", got "yaml"');
    expect(harness(['config', 'get-contexts', '-o', 'name'], { TETHER_HARNESS_OUTPUT: 'yaml' }).status).toBe(0);
    const timeout = harness(['exec', '--environment-id', 'x', '--', 'true'], {
      TETHER_HARNESS_CONNECT_TIMEOUT: 'soon',
    });
    expect(timeout.status).toBe(2);
    expect(timeout.stderr).toContain("from env 'TETHER_HARNESS_CONNECT_TIMEOUT' is invalid");
    const boolean = harness(['exec', '--', 'true'], { TETHER_HARNESS_TTY: 'perhaps' });
    expect(boolean.status).toBe(2);
    expect(boolean.stderr).toContain('Expected 1/true/yes or 0/false/no');
  });

  it('config set-context takes --environment-id (and the old --environment, with a warning), before or after it', () => {
    const config = { TETHER_CONFIG: join(dir, 'set-context.toml') };
    const current = harness(['config', 'set-context', 'a', '--environment-id', 'env-a'], config);
    expect([current.status, current.stderr]).toEqual([0, '']);
    const old = harness(['config', 'set-context', 'b', '--environment', 'env-b'], config);
    expect([old.status, old.stderr]).toEqual([
      0,
      'harness: warning: --environment is deprecated; use --environment-id\n',
    ]);
    const before = harness(['--registry', 'https://registry.example', 'config', 'set-context', 'c', '--use'], config);
    expect([before.status, before.stderr]).toEqual([0, '']);
    const view = harness(['config', 'view'], config).stdout;
    expect(view).toContain('[contexts.a]\nenvironment = "env-a"');
    expect(view).toContain('[contexts.b]\nenvironment = "env-b"');
    expect(view).toContain('[contexts.c]\nregistry = "https://registry.example"');
    // set-context reads no variable: the connection's would be written into the file unseen.
    const unseen = harness(['config', 'set-context', 'd'], { ...config, TETHER_HARNESS_ENVIRONMENT_ID: 'env-x' });
    expect(unseen.status).toBe(0);
    expect(harness(['config', 'view'], config).stdout).not.toContain('env-x');
  });

  it('--help names each variable once, and no older one', () => {
    const help = harness(['exec', '--help']).stdout;
    expect(help).not.toMatch(
      /\(also |TETHER_(REGISTRY_URL|ENVIRONMENT_ID|API_KEY|API_KEY_FILE|EXECUTOR_URL|CONNECT_TIMEOUT|CONTEXT|EXECUTOR_KEY_FILE)\b/,
    );
    for (const name of ['TETHER_HARNESS_REGISTRY', 'TETHER_HARNESS_CONNECT_TIMEOUT', 'TETHER_HARNESS_URL']) {
      expect(help.split(name).length - 1, name).toBe(1);
    }
    expect(help).not.toMatch(/default: (\{\}|\[\]|false)/);
  });
});
