import { once } from 'node:events';
import { RpcClient, RpcConnection } from '@tether/jsonrpc';
import { generateIdentity } from '@tether/noise';
import { decodeFrame, encodeFrame, type Frame } from '@tether/relay-frames';
import { type FrameLink, type FrameLinkHandlers, SecureStream } from '@tether/secure-stream';
import { expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { harnessStream, signedUrl, startRelay } from './__tests__/support.js';
import type { Direction } from './app.js';

/** The executor's side of one stream on its multiplexed environment socket (what its demultiplexer gives it). */
class EnvironmentStreamLink implements FrameLink {
  private handlers: FrameLinkHandlers | null = null;
  readonly bufferedAmount = 0;
  constructor(
    private readonly ws: WebSocket,
    readonly streamId: string,
  ) {}
  start(handlers: FrameLinkHandlers): void {
    this.handlers = handlers;
  }
  deliver(frame: Frame): void {
    this.handlers?.onFrame(frame);
  }
  send(frame: Frame): boolean {
    this.ws.send(encodeFrame(frame), { binary: true });
    return true;
  }
  pause(): void {}
  resume(): void {}
  close(reason: string): void {
    this.handlers?.onClose(reason);
  }
}

it('forwards an encrypted JSON-RPC session without any readable byte crossing it', async () => {
  const captured: Array<{ direction: Direction; data: Buffer }> = [];
  const { url } = await startRelay(
    {},
    { tap: (direction, data) => captured.push({ direction, data: Buffer.from(data) }) },
  );
  const executor = generateIdentity();
  const harnessIdentity = generateIdentity();
  const authorization = 'authz-token-for-this-harness';
  const environmentId = 'env-blind';
  const registrationId = 'reg-blind';
  const secret = 'top-secret-process-output-42';

  // Executor side: demultiplex the environment socket, accept the stream, answer JSON-RPC requests.
  const envWs = new WebSocket(signedUrl(url, 'environment', environmentId, { registrationId }), {
    perMessageDeflate: false,
  });
  await once(envWs, 'open');
  const links = new Map<string, EnvironmentStreamLink>();
  const served: string[] = [];
  envWs.on('message', (data: Buffer) => {
    const frame = decodeFrame(data);
    const link = links.get(frame.streamId);
    if (link) return link.deliver(frame);
    if (frame.kind !== 'handshake') return; // Resume: accepted and ignored
    const fresh = new EnvironmentStreamLink(envWs, frame.streamId);
    links.set(frame.streamId, fresh);
    void SecureStream.accept({
      link: fresh,
      streamId: frame.streamId,
      environmentId,
      registrationId,
      staticKeys: executor,
      message1: frame.payload,
      authorize: async (request) => request.authorization === authorization,
    }).then(({ stream }) => {
      stream.start({
        onMessage: (message) => {
          const request = JSON.parse(message.toString()) as { id: number; method: string; params: unknown };
          served.push(request.method);
          const result =
            request.method === 'initialize'
              ? { sessionId: 'session-1' }
              : { processId: 'p1', chunks: [{ chunk: Buffer.from(secret).toString('base64') }] };
          stream.send(JSON.stringify({ id: request.id, result }));
        },
        onClose: () => {},
        onDrain: () => {},
      });
    });
  });

  // Harness side: its own socket, SecureStream.initiate, JSON-RPC client.
  const { streamId, secure } = await harnessStream(signedUrl(url, 'harness', environmentId, { registrationId }), {
    environmentId,
    registrationId,
    staticKeys: harnessIdentity,
    remoteStatic: executor.publicKey,
    authorization,
  });
  const client = new RpcClient(new RpcConnection(secure), { callTimeoutMs: 10_000 });
  try {
    await expect(client.call('initialize', { clientName: 'blind-test' })).resolves.toEqual({ sessionId: 'session-1' });
    const read = await client.call<{ chunks: Array<{ chunk: string }> }>('process/read', { processId: 'p1' });
    expect(Buffer.from(read.chunks[0]?.chunk ?? '', 'base64').toString()).toBe(secret);
  } finally {
    client.close();
    envWs.close();
  }
  expect(served).toEqual(['initialize', 'process/read']);

  // Every frame the relay forwarded: binary protobuf frames of that stream, none with readable content.
  expect(captured.filter((c) => c.direction === 'to_environment').length).toBeGreaterThanOrEqual(4);
  expect(captured.filter((c) => c.direction === 'to_harness').length).toBeGreaterThanOrEqual(3);
  const secretB64 = Buffer.from(secret).toString('base64');
  for (const { data } of captured) {
    expect(decodeFrame(data).streamId).toBe(streamId);
    const text = data.toString('latin1');
    for (const needle of [
      '"method"',
      'initialize',
      'process/',
      'sessionId',
      'blind-test',
      authorization,
      secret,
      secretB64,
    ]) {
      expect(text.includes(needle), `the relay saw ${needle}`).toBe(false);
    }
  }
});
