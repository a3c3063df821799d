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
  it('every long flag has its TETHER_HARNESS_ variable, but where writing the config file or internal', () => {
    const quiet = { write: () => true };
    const rows = flagRows(
      buildProgram({ stdin: process.stdin, stdout: quiet, stderr: quiet, env: {} } as never, () => {}),
    );
    for (const row of rows) {
      const long = /--[a-z0-9-]+/.exec(row.flag)?.[0] as string;
      if (row.commands.every((c) => c === 'config set-context' || c === 'master serve')) {
        expect(row.variable, row.flag).toBeNull();
        continue;
      }
      expect(row.variable, row.flag).toBe(long === '--version' ? null : envVarName(HARNESS_ENV.app, long));
    }
    expect(rows.find((r) => r.flag.startsWith('--connect-timeout'))?.deprecated).toEqual(['TETHER_CONNECT_TIMEOUT']);
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
});
