import { once } from 'node:events';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { runCli, scratch } from '@tether/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import { buildCli } from './cli.js';
import { openSqliteStore } from './store/index.js';
import { hashToken } from './tokens.js';

const APP_DIR = join(import.meta.dirname, '..');
const test = scratch();
afterEach(() => test.cleanup());

const tempDir = () => test.dir('registry-cli-');

/** Runs the CLI in-process; resolves with the exit code and both outputs. */
const cli = (args: string[], env: NodeJS.ProcessEnv = {}) => runCli(buildCli, 'registry', args, env);

describe('registry keys', () => {
  it('create prints the token once; the store keeps only its hash; list and revoke', async () => {
    const db = `sqlite:${join(tempDir(), 'r.db')}`;
    const created = await cli(['keys', 'create', '--database', db, '--role', 'harness', '--environments', 'dev-*']);
    expect(created.code).toBe(0);
    const token = created.stdout.trim();
    expect(token).toMatch(/^treg_[A-Za-z0-9_-]{43}$/);
    expect(created.stdout).toBe(`${token}\n`);
    const listed = await cli(['keys', 'list', '--database', db]);
    expect(listed.stdout).not.toContain(token);
    const [key] = listed.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(key).toMatchObject({ role: 'harness', environments: 'dev-*', revokedAt: null });
    const store = openSqliteStore(db.slice('sqlite:'.length));
    expect((await store.findApiKey(hashToken(token)))?.id).toBe(key.id);
    await store.close();
    expect((await cli(['keys', 'revoke', key.id, '--database', db])).code).toBe(0);
    expect((await cli(['keys', 'revoke', key.id, '--database', db])).code).toBe(1);
    const after = JSON.parse((await cli(['keys', 'list', '--database', db])).stdout);
    expect(after.revokedAt).toEqual(expect.any(Number));
  });

  it('reads the database from TETHER_REGISTRY_DATABASE and validates options', async () => {
    const db = `sqlite:${join(tempDir(), 'r.db')}`;
    expect((await cli(['keys', 'create', '--role', 'admin'], { TETHER_REGISTRY_DATABASE: db })).code).toBe(0);
    expect((await cli(['keys', 'list', '--database', db])).stdout.trim().split('\n')).toHaveLength(1);
    const bad = await cli(['keys', 'create', '--database', db, '--role', 'root']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('executor, harness, admin');
    expect((await cli(['keys', 'list', '--database', 'mysql://x'])).stderr).toContain('sqlite:PATH or postgres');
    expect((await cli(['keys', 'list'])).stderr).toContain('--database');
  });

  it('create without --environments makes a key for no environment and warns; --environments is documented', async () => {
    const db = `sqlite:${join(tempDir(), 'r.db')}`;
    const created = await cli(['keys', 'create', '--database', db, '--role', 'executor']);
    expect(created.code).toBe(0);
    expect(created.stderr).toMatch(/warning: no --environments given, so this executor key may act on no environment/);
    const key = JSON.parse((await cli(['keys', 'list', '--database', db])).stdout);
    expect(key.environments).toBe('');
    const all = await cli(['keys', 'create', '--database', db, '--role', 'harness', '--environments', '*']);
    expect(all.stderr).not.toContain('warning');
    const help = (await cli(['keys', 'create', '--help'])).stdout;
    expect(help).toContain('--environments');
    expect(help.replace(/\s+/g, ' ')).toContain('default: none');
  });

  it('create --role relay needs --relay-url, which no other role takes', async () => {
    const db = `sqlite:${join(tempDir(), 'r.db')}`;
    expect((await cli(['keys', 'create', '--database', db, '--role', 'relay'])).code).toBe(2);
    const wrong = await cli(['keys', 'create', '--database', db, '--role', 'admin', '--relay-url', 'ws://r:1']);
    expect([wrong.code, wrong.stderr]).toEqual([
      2,
      expect.stringContaining('--relay-url is required for --role relay'),
    ]);
    expect((await cli(['keys', 'create', '--database', db, '--role', 'relay', '--relay-url', 'http://r:1'])).code).toBe(
      1,
    );
    const ok = await cli(['keys', 'create', '--database', db, '--role', 'relay', '--relay-url', 'ws://r:1']);
    expect(ok.code).toBe(0);
    const store = openSqliteStore(db.slice('sqlite:'.length));
    try {
      expect(await store.findApiKey(hashToken(ok.stdout.trim()))).toMatchObject({
        role: 'relay',
        relayUrl: 'ws://r:1',
      });
    } finally {
      await store.close();
    }
  });

  it('revoke also revokes the registrations made with the key and prints them', async () => {
    const db = `sqlite:${join(tempDir(), 'r.db')}`;
    const token = (await cli(['keys', 'create', '--database', db, '--role', 'executor', '--environments', '*'])).stdout;
    const store = openSqliteStore(db.slice('sqlite:'.length));
    const id = (await store.findApiKey(hashToken(token.trim())))?.id as string;
    await store.putRegistration({
      environmentId: 'dev-1',
      registrationId: 'reg-1',
      securityProfile: 'noise_hybrid_ik_v1',
      executorPublicKey: '{}',
      apiKeyId: id,
      createdAt: 1,
    });
    await store.close();
    const revoked = await cli(['keys', 'revoke', id, '--database', db]);
    expect(revoked.code).toBe(0);
    expect(revoked.stderr).toContain('and 1 registration(s) made with it');
    expect(JSON.parse(revoked.stdout)).toEqual({ environment_id: 'dev-1', registration_id: 'reg-1' });
    const after = openSqliteStore(db.slice('sqlite:'.length));
    try {
      expect(await after.currentRegistration('dev-1')).toBeUndefined();
      expect(await after.registrationRevoked('dev-1')).toBe(true);
    } finally {
      await after.close();
    }
  });

  it('environments transfer binds an environment to another active executor key', async () => {
    const db = `sqlite:${join(tempDir(), 'r.db')}`;
    await cli(['keys', 'create', '--database', db, '--role', 'executor', '--environments', '*']);
    await cli(['keys', 'create', '--database', db, '--role', 'harness', '--environments', '*']);
    const [executor, harness] = (await cli(['keys', 'list', '--database', db])).stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .sort((a, b) => (a.role < b.role ? -1 : 1));
    const done = await cli(['environments', 'transfer', 'dev-1', executor.id, '--database', db]);
    expect([done.code, done.stderr]).toEqual([0, `registry: environment dev-1 is now bound to ${executor.id}\n`]);
    const refused = await cli(['environments', 'transfer', 'dev-1', harness.id, '--database', db]);
    expect([refused.code, refused.stderr]).toEqual([1, `registry: ${harness.id} is not an active executor key\n`]);
    expect((await cli(['environments', 'transfer', 'bad id', executor.id, '--database', db])).code).toBe(2);
    const store = openSqliteStore(db.slice('sqlite:'.length));
    try {
      expect((await store.listEnvironments())[0]).toMatchObject({ environmentId: 'dev-1', ownerKeyId: executor.id });
    } finally {
      await store.close();
    }
  });

  it('serve documents its timeouts and connection cap', async () => {
    const help = (await cli(['serve', '--help'])).stdout;
    for (const flag of [
      '--connection-timeout',
      '--request-timeout',
      '--headers-timeout',
      '--keep-alive-timeout',
      '--max-connections',
    ]) {
      expect(help).toContain(flag);
    }
    expect(help).toContain('--request-timeout <duration>');
    expect(help.replace(/\s+/g, ' ')).toContain('(default: ws://127.0.0.1:8081, env: TETHER_REGISTRY_RELAY_URL)');
  });

  it('serve takes durations with units, a bare number in seconds, and flags before `serve`', async () => {
    const common = ['--database', 'sqlite::memory:', '--listen', 'http://127.0.0.1:0'];
    const tooLong = await cli([...common, 'serve', '--headers-timeout', '20', '--request-timeout', '10']);
    expect([tooLong.code, tooLong.stderr]).toEqual([
      1,
      'registry: --headers-timeout must not exceed --request-timeout\n',
    ]);
    const units = await cli(['serve', ...common, '--headers-timeout', '500ms', '--request-timeout', '1']);
    expect(units.code).toBe(0);
    expect(units.stdout).toMatch(/^http:\/\/127\.0\.0\.1:\d+\n$/);
    const minutes = await cli([...common, 'serve', '--headers-timeout', '2m', '--request-timeout', '119']);
    expect(minutes.code).toBe(1);
    const bad = await cli(['serve', ...common, '--authorization-ttl', '0']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('expected a duration more than 0, got "0"');
  });

  it.each([
    [[]],
    [['serve']],
    [['keys']],
    [['keys', 'create']],
    [['keys', 'list']],
    [['keys', 'revoke']],
    [['environments', 'transfer']],
  ])('--help for %j', async (path) => {
    const res = await cli([...path, '--help']);
    expect(res.code).toBe(0);
    expect(res.stdout).toContain('Usage: registry');
  });
});

describe('registry serve (subprocess)', () => {
  const serve = (args: string[], env: NodeJS.ProcessEnv = {}) =>
    test.spawn(process.execPath, ['--conditions=tether-source', '--import', 'tsx', 'src/main.ts', 'serve', ...args], {
      cwd: APP_DIR,
      env: { ...process.env, ...env },
    });

  it('prints only its URL, logs JSON on stderr, creates the signing key 0600 and exits 0 on SIGTERM', async () => {
    const dir = tempDir();
    const server = serve(['--listen', '127.0.0.1:0', '--data-dir', join(dir, 'data')], {
      TETHER_REGISTRY_DATABASE: `sqlite:${join(dir, 'r.db')}`,
      TETHER_REGISTRY_LOG_LEVEL: 'info',
    });
    const url = await server.line;
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(await (await fetch(`${url}/readyz`)).json()).toEqual({ status: 'ok' });
    const res = await fetch(`${url}/cloud/environment/dev-1/register`, { method: 'POST' });
    expect(res.status).toBe(401);
    expect(statSync(join(dir, 'data', 'relay-signing-key.pem')).mode & 0o777).toBe(0o600);
    server.child.kill('SIGTERM');
    const [code] = await once(server.child, 'exit');
    expect(code).toBe(0);
    expect(server.out()).toBe(`${url}\n`);
    const lines = server.err().trim().split('\n');
    expect(lines.length).toBeGreaterThan(1);
    for (const line of lines) expect(() => JSON.parse(line)).not.toThrow();
    expect(server.err()).toContain('shutting down');
  });

  it('exits 1 with a message when the database cannot be opened', async () => {
    const dir = tempDir();
    const server = serve([
      '--listen',
      '127.0.0.1:0',
      '--database',
      'postgres://nobody@127.0.0.1:1/none',
      '--data-dir',
      join(dir, 'data'),
    ]);
    const [code] = await once(server.child, 'exit');
    expect(code).toBe(1);
    expect(server.err()).toContain('cannot open the database');
  });
});
