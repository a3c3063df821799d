import { generateIdentity, publicKeyToJson } from '@tether/noise';
import { handshakeFrame, resumeFrame } from '@tether/relay-frames';
import { expect, it } from 'vitest';
import { startRig } from './__tests__/rig.js';
import { Endpoint, metric, refusal } from './__tests__/support.js';
import { CLOSE } from './limits.js';

it('revoking the executor’s key at the real registry ends its relay sockets at once (pushed) and refuses its URL', async () => {
  // A heartbeat only when an environment joins or leaves: what arrives in between came by the registry's push.
  const rig = await startRig(1, {}, 600_000);
  const { relay } = rig.relays[0] as (typeof rig.relays)[0];
  const key = publicKeyToJson(generateIdentity().publicKey);
  const registered = await rig.call('POST', '/cloud/environment/env-r/register', rig.tokens.executor, {
    security_profile: 'noise_hybrid_ik_v1',
    executor_public_key: key,
  });
  expect(registered.status).toBe(200);
  const env = await Endpoint.open(registered.body.url);
  // The relay's heartbeat on the environment's arrival tells the registry it is online.
  const connectNow = () =>
    rig.call('POST', '/cloud/environment/env-r/connect', rig.tokens.harness, { harness_public_key: key });
  await expect.poll(async () => (await connectNow()).status, { timeout: 10_000, interval: 50 }).toBe(200);
  const connect = await connectNow();
  const harness = await Endpoint.open(connect.body.url);
  harness.send(resumeFrame('stream-r', 0));
  await env.next((f) => f.kind === 'resume', 'the Resume');
  env.send(handshakeFrame('stream-r', Buffer.from('msg2')));
  await harness.next((f) => f.kind === 'handshake', 'the answer');

  expect((await rig.call('DELETE', '/v1/keys/key-executor', rig.tokens.admin)).status).toBe(200);
  expect(await harness.next((f) => f.kind === 'reset', 'the Reset')).toMatchObject({ reason: 'registration_revoked' });
  expect((await harness.closed).code).toBe(CLOSE.REGISTRATION_REVOKED);
  expect(await env.closed).toEqual({ code: CLOSE.REGISTRATION_REVOKED, reason: 'registration_revoked' });
  expect(metric(relay, 'relay_revocations_total{source="push"}')).toBe(1);
  // The executor's 24 h URL no longer opens a socket, whichever role it is turned into.
  expect(await refusal(registered.body.url)).toEqual({ status: 401, body: 'registration_revoked\n' });
});
