import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { BufferPool } from '@tether/bytes';
import { dataFrame, encodeFrame, type Frame, handshakeFrame, resumeFrame } from '@tether/relay-frames';
import { wsSocket } from '@tether/user-read';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import type { ForeignFrame } from './link.js';
import { receiveRelayFrames, WebSocketFrameLink } from './ws-link.js';

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

describe('WebSocketFrameLink', () => {
  const waitFor = async (done: () => boolean) => {
    while (!done()) await new Promise((resolve) => setTimeout(resolve, 2));
  };
  const fill = (n: number, seed: number) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 7 + seed) & 0xff));

  it('links of one process, on their own sockets, each get their own stream even from one given pool', async () => {
    // Equal-size frames, alternating between the sockets, both links given one pool: each message is
    // assembled in the same pooled slab the other socket's last message was. Nothing of one may be read
    // as part of the next (the codec keeps no state between frames).
    const shared = new BufferPool({ step: 16 * 1024 });
    const sockets = [await pair(), await pair()];
    const ids = ['stream-a', 'stream-b']; // same length: the frames are byte for byte the same size
    const seen: string[][] = [[], []];
    const foreign: ForeignFrame[] = [];
    for (const [i, { client }] of sockets.entries()) {
      const link = new WebSocketFrameLink(client, ids[i] as string, {
        onForeignFrame: (f) => foreign.push(f),
        pool: shared,
      });
      link.start({
        onFrame: (frame) => {
          if (frame.kind === 'data') seen[i]?.push(`${frame.streamId}:${frame.seq}:${Buffer.from(frame.payload)[0]}`);
        },
        onClose: () => {},
        onDrain: () => {},
      });
    }
    const rounds = 20;
    for (let seq = 1; seq <= rounds; seq++) {
      for (const [i, { server }] of sockets.entries()) {
        server.send(encodeFrame(dataFrame(ids[i] as string, seq, fill(40_000, seq + i))));
        await new Promise((resolve) => setTimeout(resolve, 1)); // let each arrive before the other's
      }
    }
    await waitFor(() => seen[0]!.length + seen[1]!.length + foreign.length >= 2 * rounds);
    expect(foreign).toEqual([]);
    for (const [i, id] of ids.entries()) {
      expect(seen[i]).toEqual(Array.from({ length: rounds }, (_, k) => `${id}:${k + 1}:${fill(1, k + 1 + i)[0]}`));
    }
  });

  it('holds a burst of frames corked until its turn ends, then writes it whole and in order, each released once written', async () => {
    const { server, client } = await pair();
    const link = new WebSocketFrameLink(client, 'stream-a');
    link.start({ onFrame: () => {}, onClose: () => {}, onDrain: () => {} });
    // Through the one listed accessor of ws's socket; `writableCorked` is Node's public count of corks.
    const socket = wsSocket(client)!;
    expect(socket).not.toBeNull();
    const received: string[] = [];
    server.on('message', (data: Buffer) => received.push(data.toString('hex')));
    const frames = [1, 2, 3, 4, 5].map((seq) => dataFrame('stream-a', seq, fill(20_000 + seq, seq)));
    let released = 0;
    for (const frame of frames) link.send(frame, () => released++);
    // The burst is held corked until its turn ends, then goes out whole, in order.
    expect(socket.writableCorked).toBe(1);
    expect(released).toBe(0);
    await waitFor(() => received.length === frames.length && released === frames.length);
    expect(socket.writableCorked).toBe(0);
    expect(received).toEqual(frames.map((frame) => Buffer.from(encodeFrame(frame)).toString('hex')));
    // A later burst is corked on its own.
    link.send(frames[0]!);
    expect(socket.writableCorked).toBe(1);
    await waitFor(() => received.length === frames.length + 1);
    expect(socket.writableCorked).toBe(0);
    link.close('done');
  });

  it('gives each link its own inbound pool, closed with the link; a given pool stays open for its giver', async () => {
    const handlers = { onFrame: () => {}, onClose: () => {}, onDrain: () => {} };
    const a = new WebSocketFrameLink((await pair()).client, 'stream-a');
    const b = new WebSocketFrameLink((await pair()).client, 'stream-b');
    const given = new BufferPool();
    const c = new WebSocketFrameLink((await pair()).client, 'stream-c', { pool: given });
    expect(a.inboundPool).not.toBe(b.inboundPool);
    expect(c.inboundPool).toBe(given);
    for (const link of [a, b, c]) link.start(handlers);
    a.close('done');
    c.close('done');
    expect(a.inboundPool.closed).toBe(true);
    expect(b.inboundPool.closed).toBe(false);
    expect(given.closed).toBe(false);
    b.close('done');
    expect(b.inboundPool.closed).toBe(true);
  });

  it("closes a paused link at once: the peer's close frame is read, not left for the close timeout", async () => {
    const { server, client } = await pair();
    const link = new WebSocketFrameLink(client, 'mine');
    link.start({ onFrame: () => undefined, onClose: () => undefined, onDrain: () => undefined });
    link.pause();
    server.send(encodeFrame(dataFrame('mine', 1, Buffer.alloc(64 * 1024))));
    const closed = once(client, 'close');
    link.close('done');
    // Without reading the server's answer the client would sit in CLOSING for ws's 30 s close timeout (and
    // the test time out); it reaches CLOSED by the handshake, with the server's code.
    const [code] = (await closed) as [number];
    expect(code).toBe(1000);
  });

  it('drops, counts and reports frames of another stream', async () => {
    const { server, client } = await pair();
    const foreign: ForeignFrame[] = [];
    const link = new WebSocketFrameLink(client, 'mine', { onForeignFrame: (f) => foreign.push(f) });
    const kinds: string[] = [];
    link.start({ onFrame: (frame) => kinds.push(frame.kind), onClose: () => {}, onDrain: () => {} });
    server.send(encodeFrame(dataFrame('theirs', 1, fill(20_000, 1))));
    server.send(encodeFrame(resumeFrame('theirs', 0)));
    server.send(encodeFrame(dataFrame('mine', 1, fill(20_000, 2))));
    await waitFor(() => kinds.length >= 1);
    expect(kinds).toEqual(['data']);
    expect(link.foreignFrames).toBe(2);
    expect(foreign).toEqual([
      { streamId: 'mine', foreignStreamId: 'theirs', kind: 'data', dropped: 1 },
      { streamId: 'mine', foreignStreamId: 'theirs', kind: 'resume', dropped: 2 },
    ]);
  });

  it('warns once per link by default', async () => {
    const { server, client } = await pair();
    const warnings: Error[] = [];
    const onWarning = (warning: Error) => {
      if ((warning as Error & { code?: string }).code === 'TETHER_FOREIGN_FRAME') warnings.push(warning);
    };
    process.on('warning', onWarning);
    cleanups.push(async () => {
      process.off('warning', onWarning);
    });
    const link = new WebSocketFrameLink(client, 'mine');
    link.start({ onFrame: () => {}, onClose: () => {}, onDrain: () => {} });
    server.send(encodeFrame(dataFrame('theirs', 1, fill(100, 1))));
    server.send(encodeFrame(dataFrame('theirs', 2, fill(100, 2))));
    await waitFor(() => link.foreignFrames >= 2 && warnings.length >= 1);
    await new Promise((resolve) => setTimeout(resolve, 20)); // warnings are emitted on a later tick
    expect(warnings).toHaveLength(1);
    expect(warnings[0]?.message).toContain('stream mine dropped a data frame of stream theirs');
  });
});
