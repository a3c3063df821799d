import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { generateIdentity, parsePublicKey, publicKeyToJson, SECURITY_PROFILE_HYBRID_IK_V1 } from '@tether/noise';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { executorOnRendezvous } from './__tests__/rendezvous-executor.js';
import { Environment } from './environment-node.js';
import { ExecutorKeyChangedError, TetherError } from './errors.js';

/** A WebSocket server on 127.0.0.1:0 standing in for "the new peer": it only counts who dials it. */
async function recordingRelay(): Promise<{ url: string; connections: () => number; close: () => Promise<void> }> {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await once(server, 'listening');
  let connections = 0;
  server.on('connection', (socket) => {
    connections++;
    socket.terminate();
  });
  return {
    url: `ws://127.0.0.1:${(server.address() as AddressInfo).port}/relay`,
    connections: () => connections,
    close: () =>
      new Promise<void>((resolve) => {
        for (const client of server.clients) client.terminate();
        server.close(() => resolve());
      }),
  };
}

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe('executor key pinning: a key given up front', () => {
  it('a bundle naming another key is refused before the relay is dialled, and not retried', async () => {
    const relay = await recordingRelay();
    cleanups.push(relay.close);
    const served = generateIdentity().publicKey;
    let requests = 0;
    const registry: Server = createServer((req, res) => {
      requests++;
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          environment_id: 'env-pin',
          url: relay.url,
          security_profile: SECURITY_PROFILE_HYBRID_IK_V1,
          executor_registration_id: 'reg-1',
          executor_public_key: publicKeyToJson(served),
          harness_key_authorization: 'auth',
        }),
      );
    });
    registry.listen(0, '127.0.0.1');
    await once(registry, 'listening');
    cleanups.push(async () => {
      registry.closeAllConnections();
      await new Promise((resolve) => registry.close(resolve));
    });
    const error = await Environment.connectRendezvous({
      registryUrl: `http://127.0.0.1:${(registry.address() as AddressInfo).port}`,
      apiKey: 'k',
      environmentId: 'env-pin',
      executorPublicKey: generateIdentity().publicKey,
    }).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(ExecutorKeyChangedError);
    expect(error).toBeInstanceOf(TetherError);
    expect(error).toMatchObject({ name: 'ExecutorKeyChangedError', code: 'executor_key_changed' });
    expect((error as Error).message).toContain('not the pinned one');
    expect(relay.connections()).toBe(0);
    expect(requests).toBe(1);
  });
});

describe('executor key pinning over a real executor', () => {
  const stack = executorOnRendezvous('env-pin-real');

  it('connects when the key given up front is the registered one', async () => {
    const registered = parsePublicKey((await stack.rig.registration('env-pin-real')).publicKey);
    const env = await Environment.connectRendezvous({
      registryUrl: stack.rig.registryUrl,
      apiKey: stack.rig.apiKey,
      environmentId: 'env-pin-real',
      executorPublicKey: registered,
    });
    cleanups.push(() => env.close());
    await expect(env.exec(['echo', 'pinned'])).resolves.toMatchObject({ exitCode: 0 });
  });

  it('a reconnect whose bundle names another executor key fails the session and sends nothing to that peer', async () => {
    const relay = await recordingRelay();
    cleanups.push(relay.close);
    const impostor = publicKeyToJson(generateIdentity().publicKey);
    let bundles = 0;
    // The registry answers honestly once; every later bundle names another key and another relay.
    const tampering: typeof fetch = async (input, init) => {
      const answer = await fetch(input, init);
      if (++bundles === 1) return answer;
      const body = JSON.parse(await answer.text()) as Record<string, unknown>;
      return new Response(JSON.stringify({ ...body, executor_public_key: impostor, url: relay.url }), {
        status: answer.status,
      });
    };
    const statuses: Array<[string, string]> = [];
    let lost: () => void = () => undefined;
    const gone = new Promise<void>((resolve) => {
      lost = resolve;
    });
    const env = await Environment.connectRendezvous({
      registryUrl: stack.rig.registryUrl,
      apiKey: stack.rig.apiKey,
      environmentId: 'env-pin-real',
      fetch: tampering,
      onStatus: (status, detail) => {
        statuses.push([status, detail]);
        if (status === 'lost') lost();
      },
    });
    cleanups.push(() => env.close());
    await expect(env.exec(['echo', 'before'])).resolves.toMatchObject({ exitCode: 0 });

    stack.rig.dropHarnessSockets('env-pin-real');
    await gone;
    expect(statuses.map(([status]) => status)).toEqual(['disconnected', 'lost']);
    expect(statuses[1]?.[1]).toContain(
      "the executor's key changed during the session with env-pin-real; not trusting it",
    );
    expect(bundles).toBe(2); // given up at once: the changed key is final, not retried
    expect(relay.connections()).toBe(0);
    expect(env.client!.isClosed).toBe(true);
    await expect(env.exec(['echo', 'after'])).rejects.toMatchObject({ code: 'closed' });
  });
});
