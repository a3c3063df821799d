/** What the interop files share: the harness side of a relayed, Noise-encrypted channel to a codex executor. */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { RpcClient, RpcConnection } from '@tether/jsonrpc';
import { type generateIdentity, type NoisePublicKey, parsePublicKey } from '@tether/noise';
import { SecureStream, WebSocketFrameLink } from '@tether/secure-stream';
import type { Bundle } from '@tether/test-kit';
import { expect } from 'vitest';
import { WebSocket } from 'ws';

/**
 * Dials the relay URL of `bundle` (a registry's `/connect` answer) and starts the Noise handshake as `identity`,
 * with the bundle's authorization and executor key unless told otherwise. `stream` settles with the handshake.
 */
export async function initiateThroughRelay(
  bundle: Omit<Bundle, 'security_profile'>,
  identity: ReturnType<typeof generateIdentity>,
  options: { authorization?: string; remoteStatic?: NoisePublicKey } = {},
): Promise<{ stream: Promise<SecureStream>; ws: WebSocket }> {
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

/**
 * JSON-RPC over `secure`: initialize (as `clientName`, a fresh session), start `argv` in /tmp as `processId`,
 * wait for its `process/closed` (the only one), and answer what it printed and its exit code. Closes the client.
 */
export async function runOverChannel(
  secure: SecureStream,
  clientName: string,
  processId: string,
  argv: string[],
): Promise<{ output: string; exitCode: number }> {
  const closed: string[] = [];
  const client = new RpcClient(new RpcConnection(secure), {
    onNotification: (method, params) => {
      if (method === 'process/closed') closed.push((params as { processId: string }).processId);
    },
    callTimeoutMs: 15_000,
  });
  try {
    const init = await client.call<{ sessionId: string }>('initialize', { clientName });
    expect(init.sessionId).toMatch(/^[0-9a-f-]{36}$/);
    client.notify('initialized', {});
    await expect(
      client.call('process/start', { processId, argv, cwd: 'file:///tmp', env: {}, tty: false }),
    ).resolves.toMatchObject({ processId });
    await expect.poll(() => closed, { timeout: 15_000 }).toEqual([processId]);
    const read = await client.call<{ chunks: Array<{ chunk: string }>; exitCode: number }>('process/read', {
      processId,
    });
    return {
      output: read.chunks.map((c) => Buffer.from(c.chunk, 'base64').toString()).join(''),
      exitCode: read.exitCode,
    };
  } finally {
    client.close();
  }
}
