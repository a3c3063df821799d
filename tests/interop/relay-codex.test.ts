/**
 * Black box, every part a real process: the `registry` and `relay` bins (built `dist/`) and an unmodified
 * `codex exec-server --remote`. Our harness-side code takes a bundle from `/connect`, dials the relay, runs the
 * Noise handshake and drives JSON-RPC; the relay only forwards.
 */

import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { RpcClient, RpcConnection } from '@tether/jsonrpc';
import { generateIdentity, parsePublicKey, publicKeyToJson } from '@tether/noise';
import { SecureStream, WebSocketFrameLink } from '@tether/secure-stream';
import { type Stack, startStack } from '@tether/test-kit';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { WebSocket } from 'ws';

const ENVIRONMENT = 'env-relay-bins';
let stack: Stack;
let registryUrl: string;
let relayUrl: string;
let tokens: Stack['keys'];

beforeAll(async () => {
  // The registry and relay bins sharing one Ed25519 key, keys for each role, codex in remote mode.
  stack = await startStack();
  ({ registryUrl, relayUrl, keys: tokens } = stack);
  await stack.startExecutor('codex', ENVIRONMENT);
});

afterAll(async () => {
  await stack?.close();
});

it('a harness reaches the real codex executor through the relay bin with a bundle from the registry bin', async () => {
  const identity = generateIdentity();
  const response = await fetch(`${registryUrl}/cloud/environment/${ENVIRONMENT}/connect`, {
    method: 'POST',
    headers: { authorization: `Bearer ${tokens.harness}`, 'content-type': 'application/json' },
    body: JSON.stringify({ harness_public_key: publicKeyToJson(identity.publicKey) }),
  });
  expect(response.status).toBe(200);
  const bundle = (await response.json()) as {
    url: string;
    environment_id: string;
    executor_registration_id: string;
    executor_public_key: Record<string, unknown>;
    harness_key_authorization: string;
  };
  expect(bundle.url.startsWith(`${relayUrl}/ws/environment/${ENVIRONMENT}?role=harness`)).toBe(true);
  const ws = new WebSocket(bundle.url, { perMessageDeflate: false });
  await once(ws, 'open');
  const streamId = randomUUID();
  const secure = await SecureStream.initiate({
    link: new WebSocketFrameLink(ws, streamId),
    streamId,
    environmentId: bundle.environment_id,
    registrationId: bundle.executor_registration_id,
    staticKeys: identity,
    remoteStatic: parsePublicKey(bundle.executor_public_key),
    authorization: bundle.harness_key_authorization,
  });
  const closed: string[] = [];
  const client = new RpcClient(new RpcConnection(secure), {
    onNotification: (method, params) => {
      if (method === 'process/closed') closed.push((params as { processId: string }).processId);
    },
    callTimeoutMs: 15_000,
  });
  try {
    const init = await client.call<{ sessionId: string }>('initialize', { clientName: 'tether-relay-bins' });
    expect(init.sessionId).toMatch(/^[0-9a-f-]{36}$/);
    client.notify('initialized', {});
    await client.call('process/start', {
      processId: 'p1',
      argv: ['printf', 'relayed'],
      cwd: 'file:///tmp',
      env: {},
      tty: false,
    });
    await expect.poll(() => closed, { timeout: 15_000 }).toEqual(['p1']);
    const read = await client.call<{ chunks: Array<{ chunk: string }>; exitCode: number }>('process/read', {
      processId: 'p1',
    });
    expect(read.chunks.map((c) => Buffer.from(c.chunk, 'base64').toString()).join('')).toBe('relayed');
    expect(read.exitCode).toBe(0);
  } finally {
    client.close();
  }
  // A URL the registry did not sign is refused at the upgrade.
  const forged = bundle.url.replace(/sig=[^&]+/, 'sig=forged');
  const refused = new WebSocket(forged);
  refused.on('error', () => {}); // terminate() below, before the (refused) connection was established
  const [, res] = (await once(refused, 'unexpected-response')) as [unknown, { statusCode: number }];
  expect(res.statusCode).toBe(401);
  refused.terminate();
});
