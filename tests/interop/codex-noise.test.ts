/**
 * Live interop with the real binary (rendezvous.md §4.10): an unmodified `codex exec-server --remote`
 * registers with a test registry and joins a test relay; our harness-side code performs the hybrid
 * Noise IK handshake through the relay and drives JSON-RPC over the encrypted stream.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { RpcClient, RpcConnection } from '@tether/jsonrpc';
import { generateIdentity, type NoisePublicKey, parsePublicKey, publicKeyToJson } from '@tether/noise';
import { SecureStream, SecureStreamError, WebSocketFrameLink } from '@tether/secure-stream';
import { type PeerHandle, startPeer, startTestRendezvous, type TestRendezvous } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';

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
    const ws = new WebSocket(bundle.url, { perMessageDeflate: false });
    await once(ws, 'open');
    const streamId = randomUUID();
    const stream = SecureStream.initiate({
      link: new WebSocketFrameLink(ws, streamId),
      streamId,
      environmentId: bundle.environment_id,
      registrationId: bundle.executor_registration_id,
      staticKeys: identity,
      remoteStatic: options.remoteStatic ?? parsePublicKey(bundle.executor_public_key),
      authorization: options.authorization ?? bundle.harness_key_authorization,
    });
    return { stream, ws };
  }

  it('completes the handshake, then initialize and an echo run through the encrypted channel', async () => {
    const relayedBefore = rig.relayed.length;
    const { stream } = await openStream();
    const secure = await stream;
    const notifications: Array<{ method: string; params: Record<string, unknown> }> = [];
    const client = new RpcClient(new RpcConnection(secure), {
      onNotification: (method, params) => notifications.push({ method, params: params as Record<string, unknown> }),
      callTimeoutMs: 15_000,
    });
    try {
      const init = await client.call<{ sessionId: string }>('initialize', { clientName: 'tether-interop' });
      expect(init.sessionId).toMatch(/^[0-9a-f-]{36}$/);
      client.notify('initialized', {});
      await expect(
        client.call('process/start', {
          processId: 'echo',
          argv: ['echo', 'hello-through-noise'],
          cwd: 'file:///tmp',
          env: {},
          tty: false,
        }),
      ).resolves.toMatchObject({ processId: 'echo' });
      await expect.poll(() => notifications.some((n) => n.method === 'process/closed'), { timeout: 15_000 }).toBe(true);
      const read = await client.call<{ chunks: Array<{ chunk: string }>; exitCode: number }>('process/read', {
        processId: 'echo',
      });
      expect(read.chunks.map((c) => Buffer.from(c.chunk, 'base64').toString()).join('')).toBe('hello-through-noise\n');
      expect(read.exitCode).toBe(0);
    } finally {
      client.close();
    }

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
