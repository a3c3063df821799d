/**
 * The flag and variable scheme on the built registry (bin/registry.js → dist), and --trust-proxy.
 */
import { spawnSync } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { envVarName, flagRows } from '@tether/telemetry/cli';
import { captureIo, withoutTetherEnv as clean, scratch } from '@tether/test-kit';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { buildRegistry } from './app.js';
import { buildCli, REGISTRY_ENV } from './cli.js';
import { openSqliteStore } from './store/index.js';

const APP_DIR = join(import.meta.dirname, '..');
const BIN = join(APP_DIR, 'bin', 'registry.js');
const test = scratch();
afterEach(() => test.cleanup());

/** The built `registry ARGS` with only these variables of ours. */
const registry = (args: string[], env: Record<string, string>) =>
  test.spawn(process.execPath, [BIN, ...args], { env: clean(env) });

describe('registry flags and variables', () => {
  it('every long flag has its TETHER_REGISTRY_ variable, but for the one-key-per-run arguments of keys create', () => {
    const rows = flagRows(buildCli(captureIo().io, () => {}));
    for (const row of rows) {
      const long = /--[a-z0-9-]+/.exec(row.flag)?.[0] as string;
      if (row.commands.join() === 'keys create' && long !== '--database') {
        expect(row.variable, row.flag).toBeNull();
        expect(row.without).toMatch(/one key per run/);
        continue;
      }
      expect(row.variable, row.flag).toBe(long === '--version' ? null : envVarName(REGISTRY_ENV.app, long));
    }
    expect(rows.find((r) => r.flag.startsWith('--database'))?.commands).toHaveLength(5);
  });

  it('--version prints package.json’s version', () => {
    const version = (JSON.parse(readFileSync(join(APP_DIR, 'package.json'), 'utf8')) as { version: string }).version;
    const result = spawnSync(process.execPath, [BIN, '--version'], { encoding: 'utf8', env: clean() });
    expect(result.stdout).toBe(`${version}\n`);
  });

  it('serves with its database, address and log format from variables, logging JSON with component=registry', async () => {
    const dir = test.dir('registry-flags-');
    const server = registry(['serve'], {
      TETHER_REGISTRY_DATABASE: `sqlite:${join(dir, 'registry.db')}`,
      TETHER_REGISTRY_LISTEN: '127.0.0.1:0',
      // The older names are still read, each with one warning.
      TETHER_REGISTRY_RELAY_URLS: 'ws://127.0.0.1:9',
      TETHER_LOG_FORMAT: 'json',
    });
    const url = await server.line;
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(url).not.toContain(':8080');
    const answer = await fetch(`${url}/readyz`, { headers: { 'x-request-id': 'flags-test-1' } });
    expect(answer.headers.get('x-request-id')).toBe('flags-test-1');
    server.child.kill('SIGTERM');
    await once(server.child, 'exit');
    const stderr = server.err();
    const listening = stderr
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .find((l) => l.msg === 'registry listening');
    expect(listening).toMatchObject({ component: 'registry' });
    expect(stderr.split('\n').filter((l) => l.startsWith('registry: warning:'))).toEqual([
      'registry: warning: TETHER_REGISTRY_RELAY_URLS is deprecated; use TETHER_REGISTRY_RELAY_URL',
      'registry: warning: TETHER_LOG_FORMAT is deprecated; use TETHER_REGISTRY_LOG_FORMAT',
    ]);
  });

  it('takes its flags before `serve` and --listen as http://HOST:PORT, without a warning', async () => {
    const database = `sqlite:${join(test.dir('registry-flags-'), 'r.db')}`;
    const server = registry(
      ['--listen', 'http://127.0.0.1:0', '--database', database, 'serve', '--keep-alive-timeout', '1500ms'],
      { TETHER_REGISTRY_LOG_FORMAT: 'json' },
    );
    expect(await server.line).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    server.child.kill('SIGTERM');
    await once(server.child, 'exit');
    expect(server.err()).not.toContain('warning');
    const wrongScheme = spawnSync(process.execPath, [BIN, 'serve', '--listen', 'ws://127.0.0.1:0'], {
      encoding: 'utf8',
      env: clean({ TETHER_REGISTRY_DATABASE: 'sqlite::memory:' }),
    });
    expect(wrongScheme.status).not.toBe(0);
    expect(wrongScheme.stderr).toContain('expected HOST:PORT or http://HOST:PORT');
  });

  it('TETHER_REGISTRY_RATE_LIMIT_UNAUTHENTICATED: the built bin answers a burst past it 429 with Retry-After', async () => {
    const server = registry(['serve'], {
      TETHER_REGISTRY_DATABASE: `sqlite:${join(test.dir('registry-flags-'), 'registry.db')}`,
      TETHER_REGISTRY_LISTEN: '127.0.0.1:0',
      TETHER_REGISTRY_RELAY_URL: 'ws://127.0.0.1:9',
      TETHER_REGISTRY_RATE_LIMIT_UNAUTHENTICATED: '3',
      TETHER_REGISTRY_LOG_LEVEL: 'warn',
    });
    const url = await server.line;
    const exchange = () =>
      fetch(`${url}/cloud/browser-grants/exchange`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ grant: `tbgr_${'A'.repeat(43)}` }),
      });
    for (let i = 0; i < 3; i++) expect((await exchange()).status).toBe(401);
    const refused = await exchange();
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('rate_limited');
    server.child.kill('SIGTERM');
    await once(server.child, 'exit');
  });

  it('--trust-proxy: request.ip is the forwarded client only behind a trusted peer', async () => {
    const store = openSqliteStore(':memory:');
    const seen: Array<Record<string, unknown>> = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => seen.push(JSON.parse(line)) });
    const build = (trustProxy?: string[]) =>
      buildRegistry(
        { relayUrls: ['ws://127.0.0.1:9'], ...(trustProxy ? { trustProxy } : {}) },
        { store, signingKey: generateKeyPairSync('ed25519'), logger },
      );
    const ipOf = async (app: Awaited<ReturnType<typeof build>>, remoteAddress: string) => {
      seen.length = 0;
      await app.inject({ url: '/livez', remoteAddress, headers: { 'x-forwarded-for': '198.51.100.7' } });
      const incoming = seen.find((l) => l.msg === 'incoming request') as { req: { remoteAddress: string } };
      return incoming.req.remoteAddress;
    };
    const trusting = await build(['10.0.0.0/8']);
    expect(await ipOf(trusting, '10.1.2.3')).toBe('198.51.100.7');
    expect(await ipOf(trusting, '192.0.2.1')).toBe('192.0.2.1');
    const plain = await build();
    expect(await ipOf(plain, '10.1.2.3')).toBe('10.1.2.3');
    await trusting.close();
    await plain.close();
    await store.close();
  });

  it('refuses a --trust-proxy entry that is not an IP or CIDR block', () => {
    const bad = spawnSync(process.execPath, [BIN, 'serve', '--database', 'sqlite::memory:', '--trust-proxy', 'a.b'], {
      encoding: 'utf8',
      env: clean(),
    });
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toContain('not an IP address or CIDR block: "a.b"');
  });
});
