import { once } from 'node:events';
import { createServer } from 'node:http';
import { generateIdentity } from '@tether/noise';
import { Telemetry } from '@tether/telemetry';
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../logger.js';
import { ExecutorMetrics } from '../metrics.js';
import { API_KEY, cleanups, ENVIRONMENT, openStream, setup, status, waitFor } from './__tests__/rig.js';
import { RegistryClient, RegistryError } from './registry-client.js';
import { RemoteLink } from './remote-link.js';

describe('remote mode: link loss', () => {
  it('redials after the relay drops the socket; the session resumes on a new stream', async () => {
    const { rendezvous, link, socket } = await setup();
    const first = await openStream(socket, link);
    const { sessionId } = await first.client.call<{ sessionId: string }>('initialize', { clientName: 'before-drop' });
    const next = rendezvous.nextSocket();
    socket.terminate();
    const socket2 = await next;
    await link.whenConnected();
    expect(rendezvous.registers).toHaveLength(1); // same signed URL, no re-registration
    const second = await openStream(socket2, link, 'authorization-2');
    const resumed = await second.client.call<{ sessionId: string }>('initialize', {
      clientName: 'after-drop',
      resumeSessionId: sessionId,
    });
    expect(resumed.sessionId).toBe(sessionId);
  });

  it('gives up (link.failed) when the registry refuses the key on re-registration, instead of retrying forever', async () => {
    const { rendezvous, link, socket } = await setup();
    rendezvous.refuseUpgrades = 403;
    rendezvous.refuseRegisters = 401;
    socket.terminate();
    const err = await link.failed;
    expect(err).toBeInstanceOf(RegistryError);
    expect(err).toMatchObject({ status: 401 });
    expect(err.message).toContain('authentication failed');
    expect(err.message).not.toContain(API_KEY);
    expect(link.state).toBe('closed');
  });

  it('registers again when the relay refuses the upgrade with a 4xx', async () => {
    const { rendezvous, link, socket } = await setup();
    rendezvous.refuseUpgrades = 403;
    socket.terminate();
    await waitFor(() => rendezvous.registers.length >= 2, 're-registration');
    rendezvous.refuseUpgrades = null;
    const socket2 = await rendezvous.nextSocket();
    expect(socket2).toBeDefined();
    await link.whenConnected();
    expect(link.registrationId).not.toBe('reg-1');
  });

  it('fails over: when its node cannot be dialled twice in a row it registers again, naming that node', async () => {
    const { rendezvous, link, socket } = await setup({ minBackoffMs: 20, maxBackoffMs: 40 });
    rendezvous.dropUpgrades = true;
    const moved = waitFor(() => rendezvous.registers.length >= 2, 're-registration');
    socket.terminate();
    await moved;
    expect(rendezvous.registers[0]).not.toHaveProperty('unreachable_relay_url');
    // The node's base URL, never the signed URL (its query is a credential).
    expect(rendezvous.registers[1]?.unreachable_relay_url).toBe(`${rendezvous.url.replace('http:', 'ws:')}/relay`);
    rendezvous.dropUpgrades = false;
    await rendezvous.nextSocket();
    await link.whenConnected();
    expect(link.registrationId).toBe('reg-2');
  });

  it('fails over after one dial that times out (a node gone silent), without a second try', async () => {
    const { rendezvous, link, socket } = await setup({ minBackoffMs: 20, maxBackoffMs: 40, connectTimeoutMs: 300 });
    rendezvous.hangUpgrades = true;
    const moved = waitFor(() => rendezvous.registers.length >= 2, 're-registration');
    socket.terminate();
    await moved;
    const [first, second] = rendezvous.upgradesAtRegister;
    expect(second! - first!, 'the first socket, then one dial that timed out').toBe(2);
    expect(rendezvous.registers[1]?.unreachable_relay_url).toBe(`${rendezvous.url.replace('http:', 'ws:')}/relay`);
    rendezvous.hangUpgrades = false;
    await link.whenConnected();
  });

  it('a single failed redial is not a failover: the same registration is dialled again', async () => {
    // Backoffs long enough that the test lets the second dial through before it is made.
    const { rendezvous, link, socket } = await setup({ minBackoffMs: 400, maxBackoffMs: 400 });
    rendezvous.dropUpgrades = true;
    socket.terminate();
    await waitFor(() => rendezvous.droppedUpgrades === 1, 'a failed redial');
    rendezvous.dropUpgrades = false;
    await rendezvous.nextSocket();
    await link.whenConnected();
    expect(rendezvous.registers).toHaveLength(1);
  });

  it('counts registrations, relay connects, drops and refusals in the remote metrics', async () => {
    const telemetry = await Telemetry.create({ serviceName: 'remote-test', prometheus: true });
    const metrics = new ExecutorMetrics(telemetry);
    const { rendezvous, link, socket } = await setup({ metrics });
    const served = await openStream(socket, link);
    await served.client.call('initialize', { clientName: 'metrics' });
    expect(metrics.snapshot().remoteWebsocketActive).toBe(1);

    rendezvous.refuseUpgrades = 403;
    socket.terminate();
    await waitFor(() => rendezvous.registers.length >= 2, 're-registration');
    rendezvous.refuseUpgrades = null;
    await rendezvous.nextSocket();
    await link.whenConnected();
    expect(metrics.snapshot().remoteWebsocketActive).toBe(1);

    const text = await telemetry.prometheus();
    expect(text).toMatch(/exec_server_remote_registration_total\{result="success"\} [2-9]\n/);
    expect(text).toMatch(/exec_server_remote_websocket_connect_total\{result="success"\} 2\n/);
    expect(text).toMatch(/exec_server_remote_websocket_connect_total\{result="rejected"\} [1-9]\d*\n/);
    expect(text).toContain('exec_server_remote_websocket_reconnects_total{reason="disconnected"} 1\n');
    expect(text).toMatch(/exec_server_remote_websocket_reconnects_total\{reason="rejected"\} [1-9]\d*\n/);
    expect(text).toContain('exec_server_remote_websocket_active 1\n');
    expect(text).toContain('exec_server_remote_registration_duration_seconds_count{result="success"}');
  });

  it('reports readiness from the relay link on /readyz', async () => {
    const { rendezvous, link, socket, server } = await setup();
    server.readinessCheck = () => link.ready;
    const url = (await server.listen('127.0.0.1', 0)).replace('ws:', 'http:');
    expect(await status(`${url}/readyz`)).toBe(200);
    rendezvous.refuseUpgrades = 503;
    socket.terminate();
    await waitFor(() => !link.ready, 'the link to go down');
    expect(await status(`${url}/readyz`)).toBe(503);
    expect(await status(`${url}/livez`)).toBe(200);
  });

  it('close() ends the socket with 1001 and stops redialing', async () => {
    const { rendezvous, link, socket } = await setup();
    const closed = once(socket, 'close');
    await link.close();
    const [code] = await closed;
    expect(code).toBe(1001);
    expect(link.state).toBe('closed');
    expect(rendezvous.sockets).toHaveLength(1);
  });
});

describe('registry client', () => {
  async function registryAnswering(status: number, body: unknown, headers: Record<string, string> = {}) {
    let calls = 0;
    const http = createServer((_req, res) => {
      calls++;
      res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));
    });
    http.listen(0, '127.0.0.1');
    await once(http, 'listening');
    cleanups.push(async () => {
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    });
    return { url: `http://127.0.0.1:${(http.address() as { port: number }).port}`, calls: () => calls };
  }

  it('explains a 401 without echoing the key', async () => {
    const registry = await registryAnswering(401, { error: { code: 'unauthorized', message: 'unknown API key' } });
    const client = new RegistryClient({ baseUrl: registry.url, apiKey: API_KEY });
    const error = await client.register(ENVIRONMENT, generateIdentity().publicKey).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(RegistryError);
    expect((error as RegistryError).message).toBe(
      'the registry refused /register with HTTP 401 (authentication failed: check the API key) [unauthorized]: unknown API key',
    );
    expect((error as RegistryError).retryable).toBe(false);
    expect(String(error)).not.toContain(API_KEY);
  });

  it('does not follow redirects', async () => {
    const registry = await registryAnswering(302, {}, { location: 'http://127.0.0.1:1/elsewhere' });
    const client = new RegistryClient({ baseUrl: registry.url, apiKey: API_KEY });
    await expect(client.register(ENVIRONMENT, generateIdentity().publicKey)).rejects.toThrow(
      /HTTP 302 \(redirects are not followed\)/,
    );
    expect(registry.calls()).toBe(1);
  });

  it.each([
    [{ environment_id: 'someone-else' }, 'environment_id does not match'],
    [{ security_profile: 'cleartext' }, 'security_profile is not noise_hybrid_ik_v1'],
  ])('rejects an answer for another environment or profile (%j)', async (change, refusal) => {
    const registry = await registryAnswering(200, {
      environment_id: ENVIRONMENT,
      url: 'ws://127.0.0.1:1/relay',
      security_profile: 'noise_hybrid_ik_v1',
      executor_registration_id: 'reg',
      ...change,
    });
    await expect(
      new RegistryClient({ baseUrl: registry.url, apiKey: API_KEY }).register(
        ENVIRONMENT,
        generateIdentity().publicKey,
      ),
    ).rejects.toThrow(refusal);
  });

  it('gives up at start after a few attempts when the registry cannot be reached', async () => {
    let attempts = 0;
    const link = new RemoteLink({
      registryUrl: 'http://127.0.0.1:1',
      environmentId: ENVIRONMENT,
      apiKey: API_KEY,
      logger: silentLogger(),
      minBackoffMs: 1,
      maxBackoffMs: 2,
      onStream: () => undefined,
      fetch: async () => {
        attempts++;
        throw new TypeError('fetch failed', { cause: { code: 'ECONNREFUSED' } });
      },
    });
    cleanups.push(() => link.close());
    await expect(link.start()).rejects.toThrow('cannot reach the registry at http://127.0.0.1:1: ECONNREFUSED');
    expect(attempts).toBe(6); // the first try and 5 retries
  });

  it('retries registration_conflict at start, then succeeds', async () => {
    let calls = 0;
    const http = createServer((_req, res) => {
      calls++;
      if (calls < 3) {
        res.writeHead(503).end(JSON.stringify({ error: { code: 'registration_conflict' } }));
        return;
      }
      res.writeHead(200).end(
        JSON.stringify({
          environment_id: ENVIRONMENT,
          url: 'ws://127.0.0.1:1/relay?role=environment',
          security_profile: 'noise_hybrid_ik_v1',
          executor_registration_id: 'reg-after-conflict',
        }),
      );
    });
    http.listen(0, '127.0.0.1');
    await once(http, 'listening');
    cleanups.push(async () => {
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    });
    const link = new RemoteLink({
      registryUrl: `http://127.0.0.1:${(http.address() as { port: number }).port}`,
      environmentId: ENVIRONMENT,
      apiKey: API_KEY,
      logger: silentLogger(),
      minBackoffMs: 5,
      maxBackoffMs: 10,
      onStream: () => undefined,
    });
    cleanups.push(() => link.close());
    await expect(link.start()).resolves.toMatchObject({ registrationId: 'reg-after-conflict' });
    expect(calls).toBe(3);
  });

  it('says no (without throwing) when /validate fails in any way', async () => {
    const broken = await registryAnswering(500, { error: { code: 'internal' } });
    const client = new RegistryClient({ baseUrl: broken.url, apiKey: API_KEY });
    const answer = await client.validate(ENVIRONMENT, {
      registrationId: 'reg',
      harnessKey: generateIdentity().publicKey,
      authorization: 'x',
    });
    expect(answer).toBe(false);
    const unreachable = new RegistryClient({ baseUrl: 'http://127.0.0.1:1', apiKey: API_KEY });
    await expect(
      unreachable.validate(ENVIRONMENT, {
        registrationId: 'r',
        harnessKey: generateIdentity().publicKey,
        authorization: 'x',
      }),
    ).resolves.toBe(false);
  });
});
