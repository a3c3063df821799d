import { once } from 'node:events';
import type { AddressInfo, Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { wsPair } from './__tests__/ws-pair.js';
import { frameHeader, installFastMessages, type Slab } from './websocket.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const tick = () => new Promise<void>((resolve) => setTimeout(resolve, 1));

/** One server-to-client frame (unmasked, RFC 6455 §5.2). */
function serverFrame(opcode: number, payload: Buffer, fin = true): Buffer {
  return Buffer.concat([frameHeader(opcode, payload.length, { fin }), payload]);
}

/** A ws server whose accepted socket the test writes raw frames to, and an open client of it. */
async function rawPair(): Promise<{ raw: Socket; client: WebSocket }> {
  const { client, peer } = await wsPair(cleanups, { maxPayload: 350_000 });
  const raw = (peer as unknown as { _socket: Socket })._socket;
  raw.setNoDelay(true);
  return { raw, client };
}

/** Counts leases and releases, so a test can see every slab come back. */
function countingLease() {
  const counts = { leased: 0, released: 0 };
  const lease = (size: number): Slab => {
    counts.leased++;
    let held = true;
    return {
      buffer: Buffer.alloc(size),
      release: () => {
        if (held) counts.released++;
        held = false;
      },
    };
  };
  return { counts, lease };
}

describe('installFastMessages (client side)', () => {
  it('delivers every message in order, fast or through ws, with reads split at arbitrary boundaries', async () => {
    const { raw, client } = await rawPair();
    const { counts, lease } = countingLease();
    const seen: string[] = [];
    client.on('message', (data: Buffer, isBinary: boolean) =>
      seen.push(`ws:${isBinary ? 'bin' : 'text'}:${data.toString('hex')}`),
    );
    client.on('ping', (data: Buffer) => seen.push(`ping:${data.toString('hex')}`));
    const switched = installFastMessages(client, {
      server: false,
      maxPayload: 300_000,
      lease,
      onMessage: (parts, length, slab) => {
        const bytes = Buffer.concat(parts, length);
        if (slab) expect(parts).toEqual([slab.buffer]);
        seen.push(`fast:bin:${bytes.toString('hex')}`);
        return false;
      },
    });
    expect(switched).toBe(true);

    const bytes = (n: number, seed: number) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 31 + seed) & 0xff));
    const sizes = [0, 1, 125, 126, 1000, 65_535, 65_536, 200_000];
    const frames: Buffer[] = [];
    const expected: string[] = [];
    sizes.forEach((size, i) => {
      const payload = bytes(size, i);
      frames.push(serverFrame(2, payload));
      expected.push(`fast:bin:${payload.toString('hex')}`);
      if (i === 2) {
        frames.push(serverFrame(1, Buffer.from('{"text":true}')));
        expected.push(`ws:text:${Buffer.from('{"text":true}').toString('hex')}`);
      }
      if (i === 4) {
        frames.push(serverFrame(9, Buffer.from('hi')));
        expected.push(`ping:${Buffer.from('hi').toString('hex')}`);
      }
      if (i === 5) {
        // A fragmented binary message, a ping between its fragments: all of it is ws's.
        const whole = bytes(3000, 99);
        frames.push(serverFrame(2, whole.subarray(0, 1000), false));
        frames.push(serverFrame(9, Buffer.from('mid')));
        frames.push(serverFrame(0, whole.subarray(1000), true));
        expected.push(`ping:${Buffer.from('mid').toString('hex')}`);
        expected.push(`ws:bin:${whole.toString('hex')}`);
      }
    });
    frames.push(serverFrame(2, bytes(400_000, 7))); // over maxPayload: ws's, which fails the socket (1009)
    const wire = Buffer.concat(frames);
    let pos = 0;
    let n = 0;
    while (pos < wire.length - 400_010) {
      const step = n++ % 3 === 0 ? 1 + (n % 13) : 1 + ((n * 7919) % 40_000);
      raw.write(wire.subarray(pos, Math.min(pos + step, wire.length - 400_010)));
      pos = Math.min(pos + step, wire.length - 400_010);
      if (n % 4 === 0) await tick();
    }
    const errors: string[] = [];
    client.on('error', (err: Error) => errors.push(err.message));
    raw.write(wire.subarray(pos));
    // Not events.once: it rejects on the 'error' that comes first.
    const code = await new Promise<number>((resolve) => client.once('close', resolve));
    expect(code).toBe(1006); // ws sent 1009 and stopped reading: the server's answer is never parsed
    expect(errors).toEqual(['Max payload size exceeded']);
    expect(seen).toEqual(expected);
    // One slab per fast message, each back in the pool.
    expect(counts).toEqual({ leased: sizes.length, released: sizes.length });
  });

  it('lets a handler keep a slab by returning true', async () => {
    const { raw, client } = await rawPair();
    const { counts, lease } = countingLease();
    const kept: Slab[] = [];
    installFastMessages(client, {
      server: false,
      maxPayload: 1 << 20,
      lease,
      onMessage: (_parts, _length, slab) => {
        if (slab) kept.push(slab);
        return true;
      },
    });
    raw.write(Buffer.concat([serverFrame(2, Buffer.from('one')), serverFrame(2, Buffer.from('two'))]));
    while (kept.length < 2) await tick();
    expect(kept.map((slab) => slab.buffer.toString())).toEqual(['one', 'two']);
    expect(counts.released).toBe(0);
  });

  it('leaves a socket alone while ws holds part of a frame', async () => {
    const { raw, client } = await rawPair();
    const got: string[] = [];
    client.on('message', (data: Buffer) => got.push(data.toString()));
    const frame = serverFrame(2, Buffer.from('split'));
    raw.write(frame.subarray(0, 3));
    const receiver = (client as unknown as { _receiver: { _bufferedBytes: number } })._receiver;
    while (receiver._bufferedBytes === 0) await tick();
    const installed = installFastMessages(client, {
      server: false,
      maxPayload: 1024,
      lease: countingLease().lease,
      onMessage: () => {
        throw new Error('not installed: ws must get the rest');
      },
    });
    expect(installed).toBe(false);
    raw.write(frame.subarray(3));
    while (got.length === 0) await tick();
    expect(got).toEqual(['split']);
  });

  it('takes text frames when asked: UTF-8 checked over the whole message, invalid text left to ws (1007)', async () => {
    const { raw, client } = await rawPair();
    const seen: string[] = [];
    const errors: string[] = [];
    client.on('message', (data: Buffer, isBinary: boolean) => seen.push(`ws:${isBinary}:${data.toString()}`));
    client.on('error', (err: Error) => errors.push(err.message));
    installFastMessages(client, {
      server: false,
      maxPayload: 1 << 20,
      text: true,
      lease: countingLease().lease,
      onMessage: (parts, length, _slab, isBinary) => {
        seen.push(`fast:${isBinary}:${Buffer.concat(parts, length).toString()}`);
        return false;
      },
    });
    const text = `{"greeting":"${'héllo wörld ☃ 😀 '.repeat(5000)}"}`;
    const wire = Buffer.concat([
      serverFrame(1, Buffer.from(text)),
      serverFrame(2, Buffer.from('bin')),
      serverFrame(1, Buffer.from([0x7b, 0xc3, 0x28, 0x7d])), // not UTF-8
    ]);
    // Reads that split multi-byte characters.
    for (let pos = 0; pos < wire.length; pos += 4099) {
      raw.write(wire.subarray(pos, pos + 4099));
      await tick();
    }
    const code = await new Promise<number>((resolve) => client.once('close', resolve));
    expect(seen).toEqual([`fast:false:${text}`, 'fast:true:bin']);
    expect(errors).toEqual(['Invalid WebSocket frame: invalid UTF-8 sequence']); // ws's own words
    expect(code).toBe(1006); // ws sent 1007 and stopped reading
  });
});

describe('installFastMessages (server side)', () => {
  it('unmasks client frames, text and binary, and leaves invalid text to ws, which closes with 1007', async () => {
    const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await once(server, 'listening');
    const seen: string[] = [];
    const { counts, lease } = countingLease();
    server.on('connection', (ws: WebSocket) => {
      ws.on('message', (data: Buffer, isBinary: boolean) => seen.push(`ws:${isBinary}:${data.toString('hex')}`));
      ws.on('error', () => {});
      installFastMessages(ws, {
        server: true,
        maxPayload: 1 << 20,
        text: true,
        lease,
        onMessage: (parts, length, _slab, isBinary) => {
          seen.push(`fast:${isBinary}:${Buffer.concat(parts, length).toString('hex')}`);
          return false;
        },
      });
    });
    const client = new WebSocket(`ws://127.0.0.1:${(server.address() as AddressInfo).port}`);
    cleanups.push(async () => {
      client.terminate();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    });
    await once(client, 'open');
    const big = Buffer.from('é'.repeat(100_000)); // masked with a random key, across many reads
    client.send(big.toString());
    client.send(Buffer.from([1, 2, 3]));
    client.send(Buffer.from([0xff, 0xfe]), { binary: false }); // text that is not UTF-8
    const code = await new Promise<number>((resolve) => client.once('close', resolve));
    expect(code).toBe(1007);
    expect(seen).toEqual([`fast:false:${big.toString('hex')}`, 'fast:true:010203']);
    expect(counts).toEqual({ leased: 3, released: 3 });
  });
});
