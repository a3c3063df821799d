import { generateIdentity, type NoisePublicKey, parsePublicKey, publicKeyToJson } from '@tether/noise';
import { SecureStreamError } from '@tether/secure-stream';
import { type PeerHandle, startPeer, startTestRendezvous, type TestRendezvous } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initiateThroughRelay, runOverChannel } from './support.ts';

const ENVIRONMENT = 'env-interop';

describe('codex exec-server --remote ↔ our harness over the Noise relay', () => {
  let rig: TestRendezvous;
  let codex: PeerHandle;

  beforeAll(async () => {
    rig = await startTestRendezvous();
    codex = await startPeer({
      kind: 'codex',
      transport: 'remote',
      args: ['--remote', rig.registryUrl, '--environment-id', ENVIRONMENT],
      env: { CODEX_API_KEY: rig.apiKey },
    });
    const registration = await rig.registration(ENVIRONMENT);
    expect(registration.securityProfile).toBe('noise_hybrid_ik_v1');
    // The executor's key JSON is exactly what our codec accepts.
    expect(parsePublicKey(registration.publicKey).suite).toBe('Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256');
    await rig.environmentOnline(ENVIRONMENT);
  });

  afterAll(async () => {
    await codex?.close();
    await rig?.close();
  });

  async function openStream(options: { authorization?: string; remoteStatic?: NoisePublicKey } = {}) {
    const identity = generateIdentity();
    const bundle = rig.connect(ENVIRONMENT, publicKeyToJson(identity.publicKey) as unknown as Record<string, unknown>);
    return initiateThroughRelay(bundle, identity, options);
  }

  it('completes the handshake, then initialize and an echo run through the encrypted channel', async () => {
    const relayedBefore = rig.relayed.length;
    const { stream } = await openStream();
    const secure = await stream;
    const echo = await runOverChannel(secure, 'tether-interop', 'echo', ['echo', 'hello-through-noise']);
    expect(echo).toEqual({ output: 'hello-through-noise\n', exitCode: 0 });

    // The executor asked the registry about exactly our authorization, once, and was told yes.
    expect(rig.validations.filter((v) => v.valid)).toHaveLength(1);
    // Nothing readable crossed the relay: binary protobuf frames only, no JSON-RPC text, no output.
    const crossed = rig.relayed.slice(relayedBefore);
    expect(crossed.length).toBeGreaterThan(4);
    expect(crossed.every((m) => m.isBinary)).toBe(true);
    for (const message of crossed) {
      const text = message.data.toString('latin1');
      for (const needle of ['"method"', 'initialize', 'process/', 'hello-through-noise', 'sessionId']) {
        expect(text.includes(needle), `relay saw ${needle}`).toBe(false);
      }
    }
  });

  it('is reset when the authorization was not minted for this harness key', async () => {
    const { stream } = await openStream({ authorization: 'forged-authorization' });
    await expect(stream).rejects.toMatchObject({ name: SecureStreamError.NAME, code: 'reset' });
    expect(rig.validations.at(-1)).toMatchObject({ valid: false });
  });

  it('fails when the pinned executor key is not the registered one', async () => {
    const impostor = generateIdentity().publicKey;
    const validationsBefore = rig.validations.length;
    const { stream } = await openStream({ remoteStatic: impostor });
    await expect(stream).rejects.toMatchObject({ name: SecureStreamError.NAME });
    // The executor could not even read message 1, so it never asked the registry.
    expect(rig.validations.length).toBe(validationsBefore);
  });
});
