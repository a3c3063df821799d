import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { generateIdentity, publicKeyToJson, SECURITY_PROFILE_HYBRID_IK_V1 } from '@tether/noise';
import { proxySettingsFromEnv } from '@tether/outbound';
import { afterEach, describe, expect, it } from 'vitest';
import { dialRendezvous } from './dial.js';
import { TetherError } from './errors.js';
import { checkRegistryUrl } from './registry.js';
import { fetchBundle } from './registry-node.js';
import { withNodePlatform } from './rendezvous-node.js';

const executor = generateIdentity();
const harness = generateIdentity();

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

const servers: Server[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    server.close();
    await once(server, 'close');
  }
});

/** A registry stand-in on 127.0.0.1:0 that answers every request with `answer`. */
async function registry(answer: (seen: Seen, res: ServerResponse) => void): Promise<{ url: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => {
      body += d;
    });
    req.on('end', () => {
      const entry = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body };
      seen.push(entry);
      answer(entry, res);
    });
  });
  servers.push(server);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

const bundle = (overrides: Record<string, unknown> = {}) =>
  JSON.stringify({
    environment_id: 'env-1',
    url: 'ws://127.0.0.1:9/relay',
    executor_registration_id: 'reg-1',
    executor_public_key: publicKeyToJson(executor.publicKey),
    harness_key_authorization: 'auth-token',
    security_profile: SECURITY_PROFILE_HYBRID_IK_V1,
    ...overrides,
  });

const reply =
  (status: number, body: string, headers: Record<string, string> = {}) =>
  (_: Seen, res: ServerResponse) => {
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    res.end(body);
  };

describe('fetchBundle through a proxy', () => {
  it('refuses to hand a plain http:// registry request to a proxy that is not on loopback', async () => {
    const rig = await registry(reply(200, bundle()));
    const proxy = proxySettingsFromEnv({ HTTP_PROXY: 'http://user:pw@proxy.invalid:3128' });
    const refused = fetchBundle({ registryUrl: rig.url, apiKey: 'key-1', proxy }, 'env-1', harness.publicKey);
    await expect(refused).rejects.toThrow(
      /refusing to send the API key to the plain http:\/\/ registry at 127\.0\.0\.1:\d+ through the proxy http:\/\/proxy\.invalid:3128/,
    );
    await expect(refused).rejects.not.toThrow(/pw/);
    expect(rig.seen).toEqual([]);
    // With explicit consent it goes to that proxy (which does not exist here: a connection failure naming it).
    const allowed = fetchBundle(
      { registryUrl: rig.url, apiKey: 'key-1', proxy, allowInsecureRegistry: true, totalTimeoutMs: 1_500 },
      'env-1',
      harness.publicKey,
    );
    await expect(allowed).rejects.toThrow(
      /cannot reach the registry at .* through the proxy http:\/\/proxy\.invalid:3128/,
    );
    // NO_PROXY exempts it: straight to the registry.
    const exempt = proxySettingsFromEnv({ HTTP_PROXY: 'http://proxy.invalid:3128', NO_PROXY: '127.0.0.1' });
    await fetchBundle({ registryUrl: rig.url, apiKey: 'key-1', proxy: exempt }, 'env-1', harness.publicKey);
    expect(rig.seen).toHaveLength(1);
  });

  it('refuses to open a plain ws:// relay socket through a proxy that is not on loopback', async () => {
    // The registry on 127.0.0.1 is exempt; the relay (localhost) is not, and its proxy is elsewhere.
    const rig = await registry(reply(200, bundle({ url: 'ws://localhost:9/ws/environment/env-1?sig=secret' })));
    const proxy = proxySettingsFromEnv({ HTTP_PROXY: 'http://proxy.invalid:3128', NO_PROXY: '127.0.0.1' });
    const pin = { check: () => undefined, trust: () => undefined };
    const options = { registryUrl: rig.url, apiKey: 'key-1', proxy, environmentId: 'env-1' };
    const dialed = dialRendezvous(
      options,
      'env-1',
      harness,
      pin,
      AbortSignal.timeout(5_000),
      undefined,
      withNodePlatform(options).platform,
    );
    await expect(dialed).rejects.toThrow(
      /refusing to open the plain ws:\/\/ relay socket through the proxy http:\/\/proxy\.invalid:3128/,
    );
    await expect(dialed).rejects.not.toThrow(/secret/);
  });
});

describe('fetchBundle (node:http)', () => {
  it('POSTs the harness key with the API key and returns the parsed bundle', async () => {
    const rig = await registry(reply(200, bundle()));
    const result = await fetchBundle({ registryUrl: `${rig.url}/`, apiKey: 'key-1' }, 'env-1', harness.publicKey);
    expect(result).toMatchObject({
      environmentId: 'env-1',
      url: 'ws://127.0.0.1:9/relay',
      registrationId: 'reg-1',
      authorization: 'auth-token',
    });
    expect(publicKeyToJson(result.executorPublicKey)).toEqual(publicKeyToJson(executor.publicKey));
    expect(rig.seen).toHaveLength(1);
    const [request] = rig.seen;
    expect(request).toMatchObject({ method: 'POST', url: '/cloud/environment/env-1/connect' });
    expect(request!.headers.authorization).toBe('Bearer key-1');
    expect(request!.headers['content-type']).toBe('application/json');
    expect(JSON.parse(request!.body)).toEqual({ harness_public_key: publicKeyToJson(harness.publicKey) });
  });

  it('maps refusals to their errors and retries none of them', async () => {
    const cases: Array<[number, RegExp]> = [
      [401, /refused the harness API key \(HTTP 401\)/],
      [404, /env-1 has no registered executor \(HTTP 404\) \[x\]: no such environment/],
      [409, /env-1 is offline/],
      [410, /env-1's executor registration was revoked \(HTTP 410\) \[x\]/],
      [302, /HTTP 302 \(redirects are not followed\)/],
      [500, /answered \/connect with HTTP 500/],
    ];
    for (const [status, message] of cases) {
      const rig = await registry(
        reply(status, JSON.stringify({ error: { code: 'x', message: 'no such environment' } }), {
          location: 'http://127.0.0.1:1/elsewhere',
        }),
      );
      await expect(fetchBundle({ registryUrl: rig.url, apiKey: 'k' }, 'env-1', harness.publicKey)).rejects.toThrow(
        message,
      );
      expect(rig.seen).toHaveLength(1);
    }
  });

  it("names the environment, not the key, when the environment is unknown or not the key's", async () => {
    const cases: Array<[number, string, string, RegExp]> = [
      [403, 'forbidden_environment', 'unauthorized', /^environment "env-1" is not one this API key may use \(/],
      [404, 'environment_not_registered', 'not_found', /^no environment "env-1" at the registry http:\/\/127/],
    ];
    for (const [status, code, errorCode, message] of cases) {
      const rig = await registry(reply(status, JSON.stringify({ error: { code, message: 'from the registry' } })));
      const failure = await fetchBundle({ registryUrl: rig.url, apiKey: 'k' }, 'env-1', harness.publicKey).catch(
        (err: unknown) => err as TetherError,
      );
      expect(failure).toBeInstanceOf(TetherError);
      expect((failure as TetherError).code).toBe(errorCode);
      expect((failure as TetherError).message).toMatch(message);
      expect((failure as TetherError).message).not.toContain('refused the harness API key');
    }
  });

  it('refuses an unusable answer: not JSON, the wrong environment, an oversized body', async () => {
    const notJson = await registry(reply(200, '<html>'));
    await expect(fetchBundle({ registryUrl: notJson.url, apiKey: 'k' }, 'env-1', harness.publicKey)).rejects.toThrow(
      /not JSON/,
    );
    const other = await registry(reply(200, bundle({ environment_id: 'env-2' })));
    await expect(fetchBundle({ registryUrl: other.url, apiKey: 'k' }, 'env-1', harness.publicKey)).rejects.toThrow(
      /environment_id does not match/,
    );
    const huge = await registry(reply(200, 'x'.repeat(300 * 1024)));
    await expect(fetchBundle({ registryUrl: huge.url, apiKey: 'k' }, 'env-1', harness.publicKey)).rejects.toThrow(
      /over 262144 bytes/,
    );
    expect(huge.seen).toHaveLength(1);
  });

  it('retries an unreachable registry within the deadline, then says so', async () => {
    const started = Date.now();
    await expect(
      fetchBundle(
        { registryUrl: 'http://127.0.0.1:1', apiKey: 'k', totalTimeoutMs: 1_000 },
        'env-1',
        harness.publicKey,
      ),
    ).rejects.toThrow('cannot reach the registry at http://127.0.0.1:1: ECONNREFUSED');
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('gives up on a registry that does not answer (per-attempt timeout), and stops at once when aborted', async () => {
    const silent = await registry(() => undefined);
    await expect(
      fetchBundle(
        { registryUrl: silent.url, apiKey: 'k', attemptTimeoutMs: 100, totalTimeoutMs: 450 },
        'env-1',
        harness.publicKey,
      ),
    ).rejects.toThrow(/cannot reach the registry at .*: timed out/);
    expect(silent.seen.length).toBeGreaterThanOrEqual(2);
    const controller = new AbortController();
    const pending = fetchBundle(
      { registryUrl: silent.url, apiKey: 'k' },
      'env-1',
      harness.publicKey,
      controller.signal,
    );
    controller.abort();
    await expect(pending).rejects.toThrow('connect aborted');
  });

  it('refuses a URL that is not http(s) and an invalid environment id before any request', async () => {
    await expect(fetchBundle({ registryUrl: 'ftp://x', apiKey: 'k' }, 'env-1', harness.publicKey)).rejects.toThrow(
      /use http\(s\):\/\//,
    );
    await expect(
      fetchBundle({ registryUrl: 'http://127.0.0.1:1', apiKey: 'k' }, 'bad id!', harness.publicKey),
    ).rejects.toThrow(/environment/);
  });

  it('uses an injected fetch instead when given one', async () => {
    const calls: string[] = [];
    const result = await fetchBundle(
      {
        registryUrl: 'https://registry.invalid',
        apiKey: 'k',
        fetch: async (input) => {
          calls.push(String(input));
          return new Response(bundle(), { status: 200 });
        },
      },
      'env-1',
      harness.publicKey,
    );
    expect(result.registrationId).toBe('reg-1');
    expect(calls).toEqual(['https://registry.invalid/cloud/environment/env-1/connect']);
  });

  it('refuses a plain http:// registry off loopback before any request, unless allowInsecureRegistry', async () => {
    const calls: string[] = [];
    const fetch = async (input: string | URL | Request) => {
      calls.push(String(input));
      return new Response(bundle(), { status: 200 });
    };
    for (const registryUrl of ['http://registry.example:8080', 'http://10.0.0.5', 'http://[fe80::1]:80/base']) {
      const refused = await fetchBundle({ registryUrl, apiKey: 'secret-key', fetch }, 'env-1', harness.publicKey).catch(
        (err: unknown) => err,
      );
      expect(refused).toMatchObject({ name: 'TetherError', code: 'invalid_argument' });
      expect((refused as Error).message).toMatch(/plain http:\/\/ registry .*sent in clear.*--allow-insecure-registry/);
      expect((refused as Error).message).not.toContain('secret-key');
    }
    expect(calls).toEqual([]);
    // Loopback (127.0.0.0/8, ::1, localhost) and https:// need no flag; the flag allows the rest.
    for (const registryUrl of [
      'http://127.0.0.1:9',
      'http://127.8.9.10',
      'http://[::1]:9',
      'http://localhost:9',
      'http://LOCALHOST.',
      'https://registry.example',
    ]) {
      await expect(fetchBundle({ registryUrl, apiKey: 'k', fetch }, 'env-1', harness.publicKey)).resolves.toMatchObject(
        { registrationId: 'reg-1' },
      );
    }
    await expect(
      fetchBundle(
        { registryUrl: 'http://registry.example:8080', apiKey: 'k', fetch, allowInsecureRegistry: true },
        'env-1',
        harness.publicKey,
      ),
    ).resolves.toMatchObject({ registrationId: 'reg-1' });
    // A host that merely starts like loopback is not loopback.
    expect(() => checkRegistryUrl('http://127.0.0.1.example.com')).toThrow(/sent in clear/);
    expect(() => checkRegistryUrl('http://localhost.example.com')).toThrow(/sent in clear/);
  });
});
