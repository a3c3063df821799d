/**
 * The flag and variable scheme on the built executor (bin/executor.js → dist), and its log lines: pretty on
 * a terminal, JSON on a pipe, both naming the component.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { envVarName, flagRows } from '@tether/telemetry/cli';
import { afterEach, describe, expect, it } from 'vitest';
import { buildCommand, EXECUTOR_ENV } from './cli.js';

const APP_DIR = join(import.meta.dirname, '..');
const BIN = join(APP_DIR, 'bin', 'executor.js');
const children: ChildProcess[] = [];

afterEach(async () => {
  for (const child of children.splice(0)) {
    if (child.exitCode === null && child.signalCode === null) {
      // script(1) runs the executor in its own session: end the whole group.
      process.kill(-(child.pid as number), 'SIGKILL');
      await once(child, 'exit');
    }
  }
});

/** Process environment without our variables, plus these. */
function env(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('TETHER_')));
  return { ...clean, ...extra };
}

/** Starts `command` (a shell line) in its own process group; resolves once `done` holds for its output. */
async function outputUntil(argv: string[], extra: Record<string, string>, done: (out: string) => boolean) {
  const child = spawn(argv[0] as string, argv.slice(1), {
    env: env(extra),
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  children.push(child);
  let out = '';
  return new Promise<string>((resolve, reject) => {
    const onData = (d: Buffer) => {
      out += d;
      if (done(out)) resolve(out);
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code) => reject(new Error(`exited ${code}: ${out}`)));
  });
}

/** A log line about the sandbox is the executor's first (available or not, it says which). */
const SANDBOX_LINE = /sandbox (un)?available/;

describe('executor flags and variables', () => {
  it('every long flag has its TETHER_EXECUTOR_ variable', () => {
    const rows = flagRows(buildCommand(async () => {}));
    expect(rows.map((r) => r.flag)).toEqual(expect.arrayContaining(['--log-level <level>', '--log-format <format>']));
    expect(rows.find((r) => r.flag.startsWith('--registry'))?.also).toEqual(['--remote']);
    expect(rows.find((r) => r.variable === 'TETHER_EXECUTOR_API_KEY')).toMatchObject({
      also: ['CODEX_API_KEY'],
      deprecated: ['TETHER_API_KEY'],
      secret: true,
    });
    for (const row of rows.filter((r) => r.flag !== '')) {
      const long = /--[a-z0-9-]+/.exec(row.flag)?.[0] as string;
      expect(row.variable, row.flag).toBe(long === '--version' ? null : envVarName(EXECUTOR_ENV.app, long));
    }
  });

  it('--version prints package.json’s version', () => {
    const version = (JSON.parse(readFileSync(join(APP_DIR, 'package.json'), 'utf8')) as { version: string }).version;
    const result = spawnSync(process.execPath, [BIN, '--version'], { encoding: 'utf8', env: env() });
    expect(result.stdout).toBe(`${version}\n`);
  });

  it('honours a variable: TETHER_EXECUTOR_ENVIRONMENT_ID is read as --environment-id', () => {
    const result = spawnSync(process.execPath, [BIN], {
      encoding: 'utf8',
      env: env({ TETHER_EXECUTOR_ENVIRONMENT_ID: 'dev-1' }),
    });
    expect(result.status).toBe(2);
    expect(result.stderr).toContain('--environment-id needs --registry');
    const bad = spawnSync(process.execPath, [BIN], {
      encoding: 'utf8',
      env: env({ TETHER_EXECUTOR_NO_FORWARD: 'maybe' }),
    });
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toContain("from env 'TETHER_EXECUTOR_NO_FORWARD' is invalid");
  });

  it('takes --registry and Codex’s --remote alike, and the older variables with one warning each', () => {
    const run = (args: string[], extra: Record<string, string> = {}) =>
      spawnSync(process.execPath, [BIN, ...args], { encoding: 'utf8', env: env(extra) });
    const refusal = 'executor: --registry http://registry.example: plain http to a host that is not loopback';
    for (const flag of ['--registry', '--remote']) {
      const result = run([flag, 'http://registry.example', '--environment-id', 'dev-1']);
      expect([result.status, result.stderr.split('\n')[0]], flag).toEqual([2, expect.stringContaining(refusal)]);
      expect(result.stderr).not.toContain('warning');
    }
    const old = run(['--environment-id', 'dev-1'], {
      TETHER_EXECUTOR_REMOTE: 'http://registry.example',
      TETHER_LOG: 'debug',
      TETHER_LOG_FORMAT: 'json',
    });
    expect(old.status).toBe(2);
    expect(old.stderr.split('\n')).toEqual([
      'executor: warning: TETHER_EXECUTOR_REMOTE is deprecated; use TETHER_EXECUTOR_REGISTRY',
      'executor: warning: TETHER_LOG is deprecated; use TETHER_EXECUTOR_LOG_LEVEL',
      'executor: warning: TETHER_LOG_FORMAT is deprecated; use TETHER_EXECUTOR_LOG_FORMAT',
      expect.stringContaining(refusal),
      '',
    ]);
    const current = run(['--environment-id', 'dev-1'], { TETHER_EXECUTOR_REGISTRY: 'http://registry.example' });
    expect([current.status, current.stderr]).toEqual([2, expect.stringMatching(new RegExp(`^${refusal}`))]);
  });

  it('--listen takes IP:PORT as ws://IP:PORT', async () => {
    const out = await outputUntil([process.execPath, BIN, '--listen', '127.0.0.1:0'], {}, (o) =>
      /^ws:\/\/127\.0\.0\.1:\d+$/m.test(o),
    );
    expect(out).toMatch(/^ws:\/\/127\.0\.0\.1:[1-9]\d*$/m);
  });

  it('logs JSON lines with the component on a pipe', async () => {
    const out = await outputUntil([process.execPath, BIN], {}, (o) => SANDBOX_LINE.test(o));
    const line = out.split('\n').find((l) => SANDBOX_LINE.test(l)) as string;
    expect(JSON.parse(line)).toMatchObject({ component: 'executor' });
  });

  it('logs pretty lines with the component on a terminal, and JSON there when asked', async () => {
    const command = `${JSON.stringify(process.execPath)} ${JSON.stringify(BIN)}`;
    const pretty = await outputUntil(['script', '-qfec', command, '/dev/null'], {}, (o) => SANDBOX_LINE.test(o));
    const line = pretty.split('\n').find((l) => SANDBOX_LINE.test(l)) as string;
    expect(line).toMatch(/(INFO|WARN).*\[executor\] sandbox/);
    expect(line.trim().startsWith('{')).toBe(false);
    const json = await outputUntil(
      ['script', '-qfec', command, '/dev/null'],
      { TETHER_EXECUTOR_LOG_FORMAT: 'json' },
      (o) => SANDBOX_LINE.test(o),
    );
    const jsonLine = json.split('\n').find((l) => SANDBOX_LINE.test(l)) as string;
    expect(JSON.parse(jsonLine.trim())).toMatchObject({ component: 'executor' });
  });
});
