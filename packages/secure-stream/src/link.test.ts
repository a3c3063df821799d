import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { dataFrame, encodeFrame, type Frame, handshakeFrame, resumeFrame } from '@tether/relay-frames';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { receiveRelayFrames } from './link.js';

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

async function pair(): Promise<{ server: WebSocket; client: WebSocket }> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await once(wss, 'listening');
  const accepted = once(wss, 'connection') as Promise<[WebSocket]>;
  const client = new WebSocket(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}`, { perMessageDeflate: false });
  await once(client, 'open');
  const [server] = await accepted;
  cleanups.push(async () => {
    client.terminate();
    server.terminate();
    await new Promise<void>((resolve) => wss.close(() => resolve()));
  });
  return { server, client };
}

describe('receiveRelayFrames', () => {
  it('hands over Data payloads during the call and keeps every other payload its own', async () => {
    const { server, client } = await pair();
    const kept: Frame[] = [];
    const dataSeen: string[] = [];
    const events: string[] = [];
    receiveRelayFrames(client, 1 << 20, {
      onFrame: (frame) => {
        kept.push(frame);
        // A Data payload is only good now (its slab is reused once this returns): read it here.
        if (frame.kind === 'data') dataSeen.push(Buffer.from(frame.payload).toString('hex'));
      },
      onInvalid: (err) => events.push(`invalid:${err.message}`),
      onText: () => events.push('text'),
    });
    const payload = (n: number, seed: number) => Buffer.from(Array.from({ length: n }, (_, i) => (i + seed) & 0xff));
    // As large as the Data frames, so its slab size class is theirs and a reuse would show.
    const message1 = payload(30_000, 1);
    server.send(encodeFrame(resumeFrame('s', 0)));
    server.send(encodeFrame(handshakeFrame('s', message1)));
    const data = [1, 2, 3, 4, 5, 6].map((seq) => payload(30_000 + seq, seq * 17));
    for (const [i, bytes] of data.entries()) server.send(encodeFrame(dataFrame('s', i + 1, bytes)));
    server.send('not a frame');
    server.send(Buffer.from([0xff, 0xff, 0xff]));
    while (kept.length < 8 || events.length < 2) await new Promise((resolve) => setTimeout(resolve, 2));
    expect(kept.map((f) => f.kind)).toEqual(['resume', 'handshake', 'data', 'data', 'data', 'data', 'data', 'data']);
    expect(dataSeen).toEqual(data.map((d) => d.toString('hex')));
    // The handshake payload was read well after its message's buffer served the Data frames above.
    const handshake = kept[1] as Extract<Frame, { kind: 'handshake' }>;
    expect(Buffer.from(handshake.payload).equals(message1)).toBe(true);
    expect(events[0]).toBe('text');
    expect(events[1]).toMatch(/^invalid:/);
  });
});
