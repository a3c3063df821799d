/**
 * Black box, every part a real process: the `registry` and `relay` bins (built `dist/`) and an unmodified
 * `codex exec-server --remote`. Our harness-side code takes a bundle from `/connect`, dials the relay, runs the
 * Noise handshake and drives JSON-RPC; the relay only forwards.
 */

import { once } from 'node:events';
import { generateIdentity, publicKeyToJson } from '@tether/noise';
import { type Stack, startStack } from '@tether/test-kit';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { initiateThroughRelay, runOverChannel } from './support.ts';

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
  const secure = await (await initiateThroughRelay(bundle, identity)).stream;
  const run = await runOverChannel(secure, 'tether-relay-bins', 'p1', ['printf', 'relayed']);
  expect(run).toEqual({ output: 'relayed', exitCode: 0 });
  // A URL the registry did not sign is refused at the upgrade.
  const forged = bundle.url.replace(/sig=[^&]+/, 'sig=forged');
  const refused = new WebSocket(forged);
  refused.on('error', () => {}); // terminate() below, before the (refused) connection was established
  const [, res] = (await once(refused, 'unexpected-response')) as [unknown, { statusCode: number }];
  expect(res.statusCode).toBe(401);
  refused.terminate();
});
