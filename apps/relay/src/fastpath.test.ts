import { randomBytes, randomUUID } from 'node:crypto';
import type { Socket } from 'node:net';
import { BufferPool } from '@tether/bytes';
import { dataFrame, encodeFrame, handshakeFrame, resumeFrame } from '@tether/relay-frames';
import { wsSocket } from '@tether/user-read';
import { describe, expect, it } from 'vitest';
import { Endpoint, signedUrl, startRelay } from './__tests__/support.js';
import { FastPath } from './fastpath.js';

const tick = () => new Promise<void>((resolve) => setTimeout(resolve, 1));

/** One client frame, masked as RFC 6455 requires; `fin` false for a first fragment. */
function clientFrame(opcode: number, payload: Buffer, fin = true, mask = randomBytes(4)): Buffer {
  const length = payload.length;
  const head =
    length < 126 ? Buffer.alloc(2) : length < 65536 ? Buffer.alloc(4) : Buffer.alloc(10, 0) /* 64-bit length */;
  head[0] = (fin ? 0x80 : 0) | opcode;
  if (length < 126) head[1] = 0x80 | length;
  else if (length < 65536) {
    head[1] = 0x80 | 126;
    head.writeUInt16BE(length, 2);
  } else {
    head[1] = 0x80 | 127;
    head.writeUInt32BE(length, 6);
  }
  const body = Buffer.alloc(length);
  for (let i = 0; i < length; i++) body[i] = (payload[i] as number) ^ (mask[i & 3] as number);
  return Buffer.concat([head, mask, body]);
}

async function pairedStream(url: string) {
  const env = await Endpoint.open(signedUrl(url, 'environment', 'env-1'));
  const streamId = randomUUID();
  const harness = await Endpoint.open(signedUrl(url, 'harness', 'env-1'));
  harness.send(resumeFrame(streamId, 0));
  await env.next((f) => f.kind === 'resume' && f.streamId === streamId);
  env.send(handshakeFrame(streamId, Buffer.from('msg2')));
  await harness.next((f) => f.kind === 'handshake');
  const socket = wsSocket(harness.ws) as Socket;
  socket.setNoDelay(true);
  return { env, harness, streamId, socket };
}

/**
 * Writes `wire` to the harness socket in pieces, the n-th (from 1) `step(n)` bytes long, yielding to the event
 * loop after every `tickEvery` writes; then the environment must have received exactly `messages`, verbatim.
 */
async function expectForwardedInPieces(
  stream: Awaited<ReturnType<typeof pairedStream>>,
  wire: Buffer,
  step: (n: number) => number,
  tickEvery: number,
  messages: Buffer[],
) {
  for (let pos = 0, n = 1; pos < wire.length; n++) {
    const size = step(n);
    stream.socket.write(wire.subarray(pos, pos + size));
    pos += size;
    if (n % tickEvery === 0) await tick();
  }
  await stream.env.dataCount(messages.length);
  const received = stream.env.raw.filter((_, i) => stream.env.frames[i]?.kind === 'data');
  expect(received.map((b) => b.toString('hex'))).toEqual(messages.map((m) => m.toString('hex')));
}

describe('data path framing', () => {
  it('forwards frames of every length split at arbitrary byte boundaries, verbatim and in order', async () => {
    const { url } = await startRelay();
    const stream = await pairedStream(url);
    const sizes = [1, 3, 100, 125, 126, 1000, 65_535, 65_536, 70_000, 200_000];
    const messages = sizes.map((size, i) =>
      Buffer.from(encodeFrame(dataFrame(stream.streamId, i + 1, randomBytes(size)))),
    );
    const wire = Buffer.concat(messages.map((m) => clientFrame(2, m)));
    // Pieces of 1…40 bytes around every header, larger ones elsewhere, each its own write and read.
    const step = (n: number) => ((n - 1) % 3 === 0 ? 1 + (n % 40) : 1 + ((n * 7919) % 50_000));
    await expectForwardedInPieces(stream, wire, step, 4, messages);
  });

  it('forwards frames masked with zeros (Tether clients) and with random keys alike', async () => {
    const { url } = await startRelay();
    const stream = await pairedStream(url);
    const sizes = [10, 200, 65_536, 100_000, 61_000, 5];
    const messages = sizes.map((size, i) =>
      Buffer.from(encodeFrame(dataFrame(stream.streamId, i + 1, randomBytes(size)))),
    );
    const zero = Buffer.alloc(4);
    const wire = Buffer.concat(messages.map((m, i) => clientFrame(2, m, true, i % 2 === 0 ? zero : randomBytes(4))));
    await expectForwardedInPieces(stream, wire, (n) => 1 + ((n * 7919) % 30_000), 3, messages);
  });

  it('hands fragmented messages and interleaved control frames to ws, and keeps forwarding after them', async () => {
    const { url } = await startRelay();
    const { env, harness, streamId, socket } = await pairedStream(url);
    const whole = Buffer.from(encodeFrame(dataFrame(streamId, 1, randomBytes(5000))));
    const after = Buffer.from(encodeFrame(dataFrame(streamId, 2, randomBytes(300))));
    let pongs = 0;
    harness.ws.on('pong', () => pongs++);
    socket.write(
      Buffer.concat([
        clientFrame(2, whole.subarray(0, 1000), false),
        clientFrame(9, Buffer.from('ping')),
        clientFrame(0, whole.subarray(1000, 4000), false),
        clientFrame(0, whole.subarray(4000), true),
        clientFrame(2, after),
      ]),
    );
    await env.dataCount(2);
    const received = env.raw.filter((_, i) => env.frames[i]?.kind === 'data');
    expect(received).toEqual([whole, after]);
    await expect.poll(() => pongs).toBe(1);
  });
});

describe('FastPath ownership', () => {
  it('gives each relay its own pool, and closing one empties its pool alone', () => {
    const a = new FastPath();
    const b = new FastPath();
    expect(a.pool).not.toBe(b.pool);
    const fromA = a.pool.lease(64 * 1024);
    const fromB = b.pool.lease(64 * 1024);
    fromA.release();
    fromB.release();
    expect(a.pool.pooledBytes).toBe(64 * 1024);
    a.close();
    expect(a.pool.pooledBytes).toBe(0);
    expect(b.pool.pooledBytes).toBe(64 * 1024);
    // A slab in flight when its relay closed comes back to nothing.
    const late = new FastPath({ pool: new BufferPool({ step: 1024 }) });
    const inFlight = late.pool.lease(4096);
    late.close();
    inFlight.release();
    expect(late.pool.pooledBytes).toBe(0);
  });
});
