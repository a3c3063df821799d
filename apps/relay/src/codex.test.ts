import { RpcClient, RpcConnection } from '@tether/jsonrpc';
import { generateIdentity, parsePublicKey, publicKeyToJson } from '@tether/noise';
import { startPeer } from '@tether/test-kit';
import { expect, it } from 'vitest';
import { startRig } from './__tests__/rig.js';
import { harnessStream, metric } from './__tests__/support.js';

// Black box: the real, unmodified `codex exec-server --remote` registers with our registry, joins our relay as
// the environment, and our harness-side code reaches it through the relay with a bundle from /connect.
it('carries the real codex executor: handshake, initialize and an RPC through the relay', async () => {
  const rig = await startRig(1);
  const { relay } = rig.relays[0]!;
  const environmentId = 'codex-relay_1';
  await using codex = await startPeer({
    kind: 'codex',
    transport: 'remote',
    args: ['--remote', rig.registryUrl, '--environment-id', environmentId],
    env: { CODEX_API_KEY: rig.tokens.executor },
  });
  await expect.poll(() => relay.environments(), { timeout: 20_000, interval: 50 }).toEqual([environmentId]);
  // The registry learns from the relay's heartbeat that the executor's link is up.
  await expect
    .poll(
      async () =>
        (await rig.call('GET', '/v1/environments', rig.tokens.admin)).body.environments?.[0]?.relay_link as string,
      { timeout: 10_000, interval: 100 },
    )
    .toBe('up');

  const identity = generateIdentity();
  const connect = await rig.call('POST', `/cloud/environment/${environmentId}/connect`, rig.tokens.harness, {
    harness_public_key: publicKeyToJson(identity.publicKey),
  });
  expect(connect.status).toBe(200);
  const bundle = connect.body;
  expect(bundle.url.startsWith(`${rig.relays[0]!.url}/ws/environment/${environmentId}?role=harness`)).toBe(true);

  const { secure } = await harnessStream(bundle.url, {
    environmentId,
    registrationId: bundle.executor_registration_id,
    staticKeys: identity,
    remoteStatic: parsePublicKey(bundle.executor_public_key),
    authorization: bundle.harness_key_authorization,
  });
  const notifications: string[] = [];
  const client = new RpcClient(new RpcConnection(secure), {
    onNotification: (method) => notifications.push(method),
    callTimeoutMs: 15_000,
  });
  try {
    const init = await client.call<{ sessionId: string }>('initialize', { clientName: 'tether-relay-test' });
    expect(init.sessionId).toMatch(/^[0-9a-f-]{36}$/);
    client.notify('initialized', {});
    await expect(
      client.call('process/start', {
        processId: 'echo',
        argv: ['echo', 'through-the-relay'],
        cwd: 'file:///tmp',
        env: {},
        tty: false,
      }),
    ).resolves.toMatchObject({ processId: 'echo' });
    await expect.poll(() => notifications.includes('process/closed'), { timeout: 15_000 }).toBe(true);
    const read = await client.call<{ chunks: Array<{ chunk: string }>; exitCode: number }>('process/read', {
      processId: 'echo',
    });
    expect(read.chunks.map((c) => Buffer.from(c.chunk, 'base64').toString()).join('')).toBe('through-the-relay\n');
    expect(read.exitCode).toBe(0);
  } finally {
    client.close();
  }
  // Closing the harness side tells the executor through a Reset; the relay's counters saw the session.
  await expect.poll(() => relay.stats().streams).toBe(0);
  expect(metric(relay, 'relay_forwarded_frames_total{direction="to_environment"}')).toBeGreaterThanOrEqual(4);
  expect(metric(relay, 'relay_forwarded_frames_total{direction="to_harness"}')).toBeGreaterThanOrEqual(4);
  expect(codex.pid).toBeGreaterThan(0);
});
