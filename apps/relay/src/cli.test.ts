import { once } from 'node:events';
import { join } from 'node:path';
import { buildRegistry, generateToken, hashToken, openSqliteStore } from '@tether/registry';
import { resumeFrame } from '@tether/relay-frames';
import { runCli, scratch } from '@tether/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import { Endpoint, publicKeyFile, refusal, signedUrl, signingKey } from './__tests__/support.js';
import { buildCli } from './cli.js';

const APP_DIR = join(import.meta.dirname, '..');
const test = scratch();
afterEach(() => test.cleanup());

/** The registry's public key as the PEM a relay operator would be given. */
const publicPemFile = () => publicKeyFile(test.dir('relay-cli-'));

/** Runs the CLI in-process (nothing listens: stopSignal is already resolved); exit code and outputs. */
const cli = (args: string[]) => runCli(buildCli, 'relay', args);

/** `relay serve` as a real process, from sources. */
const serve = (args: string[], env: NodeJS.ProcessEnv = {}) =>
  test.spawn(process.execPath, ['--conditions=tether-source', '--import', 'tsx', 'src/main.ts', 'serve', ...args], {
    cwd: APP_DIR,
    env: { ...process.env, ...env },
  });

describe('relay CLI (in-process)', () => {
  it.each([[[]], [['serve']]])('--help for %j', async (path) => {
    const res = await cli([...path, '--help']);
    expect(res.code).toBe(0);
    expect(res.stdout).toContain('Usage: relay');
  });

  it('documents every bound as a flag with its env variable', async () => {
    const res = await cli(['serve', '--help']);
    for (const flag of [
      '--max-streams-per-environment',
      '--harness-max-buffered-bytes',
      '--idle-timeout <duration>',
      '--handshake-timeout <duration>',
      '--url-lifetime <duration>',
      '--max-remembered-registrations',
      '--max-connections <n>',
      '--max-sockets-per-url <n>',
      '--max-unclaimed-per-url <n>',
      '--revocation-push-from <address>',
    ]) {
      expect(res.stdout).toContain(flag);
    }
    expect(res.stdout).toContain('TETHER_RELAY_MAX_CONNECTIONS_PER_IP');
    expect(res.stdout).toContain('TETHER_RELAY_HANDSHAKE_TIMEOUT)');
    // The -ms spellings still work but are not offered.
    expect(res.stdout).not.toMatch(/^\s+--[a-z-]+-ms\b/m);
    // The registry credential is a relay-role key: the relay needs no admin rights.
    expect(res.stdout.replace(/\s+/g, ' ')).toContain('API key with the relay role');
  });

  it('refuses to start without a way to get the registry key, and bad flags', async () => {
    expect((await cli(['serve', '--listen', '127.0.0.1:0'])).code).toBe(2);
    const bad = await cli(['serve', '--listen', 'nowhere']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('HOST:PORT');
    expect(
      (await cli(['serve', '--registry-key-file', publicPemFile(), '--max-streams-per-environment', '0'])).code,
    ).not.toBe(0);
  });
});

describe('relay serve (subprocess)', () => {
  it('prints only its URL, logs JSON without signatures on stderr, and closes sockets with 1001 then exits 0 on SIGTERM', async () => {
    const server = serve(
      ['--listen', '127.0.0.1:0', '--registry-key-file', publicPemFile(), '--handshake-timeout', '4321'],
      { TETHER_RELAY_LOG_LEVEL: 'debug' },
    );
    const url = await server.line;
    expect(url).toMatch(/^ws:\/\/127\.0\.0\.1:\d+$/);
    expect(await (await fetch(`${url.replace('ws:', 'http:')}/readyz`)).json()).toEqual({ status: 'ready' });
    const envUrl = signedUrl(url, 'environment', 'env-cli');
    const env = await Endpoint.open(envUrl);
    const forged = envUrl.replace(/sig=[^&]+/, 'sig=AAAA');
    expect((await refusal(forged)).status).toBe(401);
    server.child.kill('SIGTERM');
    expect((await env.closed).code).toBe(1001);
    const [code] = await once(server.child, 'exit');
    expect(code).toBe(0);
    expect(server.out()).toBe(`${url}\n`);
    const lines = server.err().trim().split('\n');
    for (const line of lines) expect(() => JSON.parse(line)).not.toThrow();
    expect(lines.some((l) => JSON.parse(l).msg === 'environment connected')).toBe(true);
    expect(lines.some((l) => JSON.parse(l).msg === 'upgrade refused')).toBe(true);
    const listening = lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'relay listening');
    expect(listening.limits).toMatchObject({ handshakeTimeoutMs: 4321, urlLifetimeMs: 24 * 3600_000 });
    const signature = new URL(envUrl).searchParams.get('sig') as string;
    expect(server.err()).not.toContain(signature);
    expect(server.err()).not.toContain('sig=');
  });

  it('takes every flag from TETHER_RELAY_* and fetches the key from the registry, then heartbeats to it with a relay-role key', async () => {
    const dir = test.dir('relay-cli-');
    const store = openSqliteStore(join(dir, 'r.db'));
    const publicUrl = 'ws://relay-node.test:8081';
    const registry = await buildRegistry({ relayUrls: [publicUrl] }, { store, signingKey });
    const registryUrl = await registry.listen({ host: '127.0.0.1', port: 0 });
    const admin = generateToken();
    await store.createApiKey({
      id: 'admin',
      tokenHash: hashToken(admin),
      role: 'admin',
      environments: '*',
      label: '',
      createdAt: Date.now(),
    });
    // The relay's own credential: a relay key, bound to this node's URL, that can do nothing but heartbeat.
    const relayKey = generateToken();
    await store.createApiKey({
      id: 'relay-node',
      tokenHash: hashToken(relayKey),
      role: 'relay',
      relayUrl: publicUrl,
      environments: '*',
      label: '',
      createdAt: Date.now(),
    });
    // The environment is registered to this node (a heartbeat links only environments registered to the node).
    await store.createApiKey({
      id: 'executor',
      tokenHash: hashToken(generateToken()),
      role: 'executor',
      environments: '*',
      label: '',
      createdAt: Date.now(),
    });
    await store.putRegistration({
      environmentId: 'env-cli',
      registrationId: 'reg-cli',
      securityProfile: 'noise_hybrid_ik_v1',
      executorPublicKey: '{}',
      apiKeyId: 'executor',
      createdAt: Date.now(),
      relayUrl: publicUrl,
    });
    try {
      const server = serve([], {
        TETHER_RELAY_LISTEN: '127.0.0.1:0',
        TETHER_RELAY_REGISTRY: registryUrl,
        TETHER_RELAY_REGISTRY_TOKEN: relayKey,
        TETHER_RELAY_PUBLIC_URL: publicUrl,
        TETHER_RELAY_HEARTBEAT_INTERVAL: '200ms',
        TETHER_RELAY_MAX_STREAMS_PER_ENVIRONMENT: '1',
      });
      const url = await server.line;
      const env = await Endpoint.open(signedUrl(url, 'environment', 'env-cli'));
      const first = await Endpoint.open(signedUrl(url, 'harness', 'env-cli'));
      first.send(resumeFrame('s1', 0));
      await env.next((f) => f.kind === 'resume');
      const second = await Endpoint.open(signedUrl(url, 'harness', 'env-cli'));
      second.send(resumeFrame('s2', 0));
      expect(await second.next((f) => f.kind === 'reset')).toMatchObject({ reason: 'stream_limit' });
      // The registry saw this node live under its public URL, with the environment connected.
      await expect
        .poll(async () => (await store.relayLink('env-cli'))?.relayUrl, { timeout: 10_000, interval: 100 })
        .toBe(publicUrl);
      const nodes = await fetch(`${registryUrl}/v1/relay/nodes`, { headers: { authorization: `Bearer ${admin}` } });
      expect(((await nodes.json()) as { nodes: unknown[] }).nodes).toEqual([
        expect.objectContaining({ url: publicUrl, live: true }),
      ]);
      expect(server.err()).not.toContain(relayKey);
      server.child.kill('SIGTERM');
      const [code] = await once(server.child, 'exit');
      expect(code).toBe(0);
    } finally {
      await registry.close();
      await store.close();
    }
  });
});
