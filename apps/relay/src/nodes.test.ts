import { generateIdentity, publicKeyToJson } from '@tether/noise';
import { resumeFrame } from '@tether/relay-frames';
import { expect, it } from 'vitest';
import { startRig } from './__tests__/rig.js';
import { Endpoint } from './__tests__/support.js';

it('two relay nodes behind one registry: each environment is served entirely by its node', async () => {
  const rig = await startRig(2);
  const [a, b] = rig.relays as [(typeof rig.relays)[0], (typeof rig.relays)[0]];
  const key = publicKeyToJson(generateIdentity().publicKey);
  const ids = Array.from({ length: 16 }, (_, i) => `env-${i}`);
  const environments = new Map<string, { env: Endpoint; node: string }>();
  /** The registry's environment list, as an admin reads it. */
  const listed = async () =>
    (await rig.call('GET', '/v1/environments', rig.tokens.admin)).body.environments as Array<{
      relay_link: string;
      relay_node: string;
      environment_id: string;
    }>;
  const poll = { timeout: 10_000, interval: 100 };
  for (const id of ids) {
    const registered = await rig.call('POST', `/cloud/environment/${id}/register`, rig.tokens.executor, {
      security_profile: 'noise_hybrid_ik_v1',
      executor_public_key: key,
    });
    expect(registered.status).toBe(200);
    const node = [a.url, b.url].find((u) => registered.body.url.startsWith(`${u}/`)) as string;
    expect(node).toBeDefined();
    environments.set(id, { env: await Endpoint.open(registered.body.url), node });
  }
  // Both nodes serve some environments, and each reports exactly its own to the registry.
  const onA = ids.filter((id) => environments.get(id)?.node === a.url);
  const onB = ids.filter((id) => environments.get(id)?.node === b.url);
  expect(onA.length).toBeGreaterThan(0);
  expect(onB.length).toBeGreaterThan(0);
  expect(a.relay.environments().sort()).toEqual(onA.sort());
  expect(b.relay.environments().sort()).toEqual(onB.sort());
  await expect
    .poll(
      async () =>
        (await listed()).every(
          (e) => e.relay_link === 'up' && e.relay_node === environments.get(e.environment_id)?.node,
        ),
      poll,
    )
    .toBe(true);

  // A harness bundle points at the environment's node, and its stream reaches that environment socket.
  for (const id of [onA[0], onB[0]] as string[]) {
    const connect = await rig.call('POST', `/cloud/environment/${id}/connect`, rig.tokens.harness, {
      harness_public_key: key,
    });
    expect(connect.status).toBe(200);
    const { env, node } = environments.get(id)!;
    expect(connect.body.url.startsWith(`${node}/`)).toBe(true);
    const harness = await Endpoint.open(connect.body.url);
    const streamId = `stream-${id}`;
    harness.send(resumeFrame(streamId, 0));
    await env.next((f) => f.kind === 'resume' && f.streamId === streamId);
    // The same grant on the other node finds no environment there.
    const other = node === a.url ? b.url : a.url;
    const stray = await Endpoint.open(connect.body.url.replace(node, other));
    stray.send(resumeFrame(`${streamId}-stray`, 0));
    expect(await stray.next((f) => f.kind === 'reset')).toMatchObject({ reason: 'environment_offline' });
  }

  // An environment leaving its node is reported as down by the next heartbeat.
  const leaving = onA[0] as string;
  environments.get(leaving)?.env.ws.close(1000);
  await expect
    .poll(async () => (await listed()).find((e) => e.environment_id === leaving)?.relay_link, poll)
    .toBe('down');
});
