/**
 * The flag and variable scheme on the built relay (bin/relay.js → dist): every long flag has its
 * TETHER_RELAY_ variable, a variable is honoured, --version is package.json's, and --trust-proxy decides
 * whether the per-IP limit counts the X-Forwarded-For address or the socket's.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { envVarName, flagRows } from '@tether/telemetry/cli';
import { captureIo, scratch, withoutTetherEnv } from '@tether/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { publicKeyFile, signedUrl } from './__tests__/support.js';
import { buildCli, RELAY_ENV } from './cli.js';

const APP_DIR = join(import.meta.dirname, '..');
const BIN = join(APP_DIR, 'bin', 'relay.js');
const test = scratch();
const sockets: WebSocket[] = [];

afterEach(async () => {
  for (const ws of sockets.splice(0)) ws.terminate();
  await test.cleanup();
});

const keyFile = () => publicKeyFile(test.dir('relay-flags-'));

/** The built relay with these arguments and only these variables of ours; `line` is its printed URL. */
const spawnRelay = (args: string[], env: Record<string, string>) =>
  test.spawn(process.execPath, [BIN, ...args], { env: withoutTetherEnv(env) });

/** `relay serve ARGS` built, with only these variables of ours. */
const serve = (args: string[], env: Record<string, string>) => spawnRelay(['serve', ...args], env);

/** Opens a harness socket with this X-Forwarded-For; the HTTP status it was refused with, or 101. */
async function upgrade(url: string, forwardedFor: string): Promise<number> {
  const ws = new WebSocket(signedUrl(url, 'harness', 'env-ip'), {
    perMessageDeflate: false,
    headers: { 'x-forwarded-for': forwardedFor },
  });
  sockets.push(ws);
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve(101));
    ws.once('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
    ws.once('error', reject);
  });
}

/** POSTs a small body from `localAddress` with this signature header; the HTTP status. */
function request(url: string, localAddress: string, signature: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      url,
      {
        method: 'POST',
        localAddress,
        headers: { 'content-type': 'application/json', 'x-tether-signature': signature },
      },
      (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      },
    );
    req.on('error', reject);
    req.end('{"revoked_registrations":[],"issued_at":1}');
  });
}

describe('relay flags and variables', () => {
  it('every long flag has its TETHER_RELAY_ variable', () => {
    const rows = flagRows(buildCli(captureIo().io, () => {}));
    expect(rows.length).toBeGreaterThan(20);
    for (const row of rows) {
      const long = /--[a-z0-9-]+/.exec(row.flag)?.[0] as string;
      expect(row.variable, row.flag).toBe(long === '--version' ? null : envVarName(RELAY_ENV.app, long));
    }
  });

  it('--version prints package.json’s version', () => {
    const version = (JSON.parse(readFileSync(join(APP_DIR, 'package.json'), 'utf8')) as { version: string }).version;
    const result = spawnSync(process.execPath, [BIN, '--version'], { encoding: 'utf8' });
    expect(result.status).toBe(0);
    expect(result.stdout).toBe(`${version}\n`);
  });

  it('honours a variable (listen address and key file from the environment), and a flag beats it', async () => {
    const fromEnv = serve([], { TETHER_RELAY_LISTEN: '127.0.0.1:0', TETHER_RELAY_REGISTRY_KEY_FILE: keyFile() });
    const url = await fromEnv.line;
    expect(url).toMatch(/^ws:\/\/127\.0\.0\.1:\d+$/);
    expect(url).not.toBe('ws://127.0.0.1:8081');
    const flagWins = serve(['--listen', '127.0.0.1:0'], {
      TETHER_RELAY_LISTEN: 'not-an-address',
      TETHER_RELAY_REGISTRY_KEY_FILE: keyFile(),
    });
    expect(await flagWins.line).toMatch(/^ws:\/\/127\.0\.0\.1:\d+$/);
  });

  it('takes durations with units, --listen as ws://, flags before `serve`, and the old -ms spellings with a warning', async () => {
    /** The relay logs these limits (among all) once it listens. */
    const expectLimits = (relay: { err(): string }, limits: Record<string, number>) =>
      expect
        .poll(
          () =>
            relay
              .err()
              .split('\n')
              .filter((line) => line.startsWith('{'))
              .map((line) => JSON.parse(line) as { msg?: string; limits?: Record<string, number> })
              .find((line) => line.msg === 'relay listening')?.limits,
        )
        .toMatchObject(limits);
    const current = spawnRelay(
      ['--listen', 'ws://127.0.0.1:0', '--idle-timeout', '5m', 'serve', '--ping-interval', '1.5s'],
      { TETHER_RELAY_REGISTRY_KEY_FILE: keyFile(), TETHER_RELAY_CLOSE_GRACE: '250' },
    );
    expect(await current.line).toMatch(/^ws:\/\/127\.0\.0\.1:\d+$/);
    await expectLimits(current, { idleTimeoutMs: 300_000, pingIntervalMs: 1500, closeGraceMs: 250 });
    expect(current.err()).not.toContain('deprecated');

    const old = spawnRelay(
      ['serve', '--listen', '127.0.0.1:0', '--idle-timeout-ms', '60000', '--pong-timeout-ms', '2m'],
      {
        TETHER_RELAY_REGISTRY_KEY_FILE: keyFile(),
        TETHER_RELAY_CLOSE_GRACE_MS: '300',
        TETHER_LOG_FORMAT: 'json',
      },
    );
    await old.line;
    await expectLimits(old, { idleTimeoutMs: 60_000, pongTimeoutMs: 120_000, closeGraceMs: 300 });
    const warnings = old
      .err()
      .split('\n')
      .filter((line) => line.startsWith('relay: warning:'));
    expect(warnings.sort()).toEqual(
      [
        'relay: warning: --idle-timeout-ms is deprecated; use --idle-timeout',
        'relay: warning: --pong-timeout-ms is deprecated; use --pong-timeout',
        'relay: warning: TETHER_RELAY_CLOSE_GRACE_MS is deprecated; use TETHER_RELAY_CLOSE_GRACE',
        'relay: warning: TETHER_LOG_FORMAT is deprecated; use TETHER_RELAY_LOG_FORMAT',
      ].sort(),
    );

    const bad = spawnSync(process.execPath, [BIN, 'serve', '--idle-timeout', '5 minutes'], { encoding: 'utf8' });
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toContain('expected a duration such as 500ms, 30s, 5m or 1h (a bare number is milliseconds)');
  });

  it('never shows the registry token from its variable, in --help or in an error', () => {
    const secret = 'tok_do-not-print-this';
    const env = { ...process.env, TETHER_RELAY_REGISTRY_TOKEN: secret };
    const help = spawnSync(process.execPath, [BIN, 'serve', '--help'], { encoding: 'utf8', env });
    expect(help.stdout).toContain('TETHER_RELAY_REGISTRY_TOKEN');
    expect(help.stdout + help.stderr).not.toContain(secret);
    const bad = spawnSync(process.execPath, [BIN, 'serve', '--log-level', 'loud'], { encoding: 'utf8', env });
    expect(bad.status).not.toBe(0);
    expect(bad.stdout + bad.stderr).not.toContain(secret);
  });

  it('--trust-proxy: the per-IP limit counts the forwarded address only behind a trusted peer', async () => {
    const common = ['--listen', '127.0.0.1:0', '--registry-key-file', keyFile(), '--max-connections-per-ip', '1'];
    const trusting = await serve([...common, '--trust-proxy', '127.0.0.1/32'], {}).line;
    expect(await upgrade(trusting, '198.51.100.1')).toBe(101);
    expect(await upgrade(trusting, '198.51.100.2')).toBe(101);
    // The same forwarded client twice is one IP.
    expect(await upgrade(trusting, '198.51.100.2')).toBe(429);

    const plain = await serve(common, {}).line;
    expect(await upgrade(plain, '198.51.100.1')).toBe(101);
    // Not trusted: both are 127.0.0.1, whatever the header says.
    expect(await upgrade(plain, '198.51.100.2')).toBe(429);

    // A trusted range the peer is not in: the header is ignored too.
    const elsewhere = await serve([...common, '--trust-proxy', '10.0.0.0/8'], {}).line;
    expect(await upgrade(elsewhere, '198.51.100.1')).toBe(101);
    expect(await upgrade(elsewhere, '198.51.100.2')).toBe(429);
  });

  it('revocation pushes: from --registry’s addresses only, or --revocation-push-from’s, or any without either', async () => {
    const common = ['--listen', '127.0.0.1:0', '--registry-key-file', keyFile()];
    // The status of a push (a well-shaped signature that does not verify) sent from `from`.
    const push = (url: string, from: string) =>
      request(`${url.replace('ws:', 'http:')}/v1/revocations`, from, 'A'.repeat(86));
    // The registry's port does not matter: its host names the addresses pushes are taken from.
    const known = await serve([...common, '--registry', 'http://localhost:9'], {}).line;
    expect(await push(known, '127.0.0.2')).toBe(403);
    expect(await push(known, '127.0.0.1')).toBe(401);
    const listed = await serve([...common, '--revocation-push-from', '127.0.0.2'], {}).line;
    expect(await push(listed, '127.0.0.1')).toBe(403);
    expect(await push(listed, '127.0.0.2')).toBe(401);
    // A host name is resolved (a Kubernetes headless service naming the registry's pods, here loopback).
    const named = await serve([...common, '--revocation-push-from', 'localhost'], {}).line;
    expect(await push(named, '127.0.0.2')).toBe(403);
    expect(await push(named, '127.0.0.1')).toBe(401);
    const unknown = await serve(common, {}).line;
    expect(await push(unknown, '127.0.0.2')).toBe(401);
  });

  it('refuses a --trust-proxy entry that is not an IP or CIDR block, naming it', () => {
    const bad = spawnSync(process.execPath, [BIN, 'serve', '--trust-proxy', '10.0.0.0/40'], { encoding: 'utf8' });
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toContain('not an IP address or CIDR block: "10.0.0.0/40"');
  });
});
