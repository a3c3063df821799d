import { randomUUID } from 'node:crypto';
import { BufferPool } from '@tether/bytes';
import { RpcClient, RpcConnection } from '@tether/jsonrpc';
import { generateIdentity, SUITE_HYBRID_CHACHAPOLY } from '@tether/noise';
import { dataFrame, type Frame, handshakeFrame, resetFrame } from '@tether/relay-frames';
import { describe, expect, it } from 'vitest';
import { ids, pair, pairOver, startStreams } from './__tests__/pairs.js';
import { PROTOCOL_ERROR_RESET, SecureStreamError } from './errors.js';
import { createMemoryLinkPair, type FrameLink } from './link.js';
import { SecureStream } from './secure-stream.js';

describe('SecureStream', () => {
  it('gives each stream its own pools and closes them when it ends; given pools stay open for their giver', async () => {
    const given = { frames: new BufferPool(), messages: new BufferPool() };
    const first = await pair({ harnessPools: given });
    const [harnessStream, { stream: executorStream }] = await Promise.all([first.initiated, first.accepted]);
    const second = await pair();
    const [otherHarness, { stream: otherExecutor }] = await Promise.all([second.initiated, second.accepted]);
    expect(harnessStream.bufferPools).toBe(given);
    const own = [executorStream, otherHarness, otherExecutor].map((stream) => stream.bufferPools);
    for (const pools of own) {
      expect(pools.frames).not.toBe(pools.messages);
      for (const other of [given, ...own]) if (other !== pools) expect(other.frames).not.toBe(pools.frames);
    }
    executorStream.close();
    expect(executorStream.bufferPools.frames.closed).toBe(true);
    expect(executorStream.bufferPools.messages.closed).toBe(true);
    expect(otherExecutor.bufferPools.frames.closed).toBe(false);
    await new Promise((resolve) => setTimeout(resolve, 10)); // the Reset reaches the harness side
    expect(harnessStream.status).toBe('closed');
    expect(given.frames.closed).toBe(false); // its creator closes it
    otherHarness.close();
    expect(otherHarness.bufferPools.frames.closed).toBe(true);
  });

  it('handshakes, authenticates the harness key to the executor, and carries JSON-RPC both ways', async () => {
    const { initiated, accepted, seen, harness, harnessSent } = await pair();
    const [harnessStream, { stream: executorStream, authorization }] = await Promise.all([initiated, accepted]);
    expect(authorization).toBe('token-123');
    expect(seen[0]?.harnessKey).toEqual(harness.publicKey.x25519);
    expect(harnessSent.slice(0, 2).map((f) => f.kind)).toEqual(['resume', 'handshake']);

    // A server on the executor side echoing a 300 KiB payload (several 60 KiB records each way).
    const server = new RpcConnection(executorStream);
    server.start({
      onMessage: (m) => {
        if (m.kind === 'request') server.sendResponse(m.id, { echo: m.params });
      },
    });
    const client = new RpcClient(new RpcConnection(harnessStream), { callTimeoutMs: 5000 });
    const big = 'x'.repeat(300 * 1024);
    await expect(client.call('echo', { big })).resolves.toEqual({ echo: { big } });
    await expect(client.call('echo', { n: 2 })).resolves.toEqual({ echo: { n: 2 } });
    const dataFrames = harnessSent.filter((f) => f.kind === 'data');
    expect(dataFrames.length).toBeGreaterThanOrEqual(6);
    expect(dataFrames.map((f) => (f.kind === 'data' ? f.seq : -1))).toEqual(dataFrames.map((_, i) => i));
    // No plaintext on the wire.
    for (const frame of dataFrames) {
      if (frame.kind === 'data') expect(Buffer.from(frame.payload).toString('latin1')).not.toContain('"method"');
    }
    client.close();
  });

  it('releases a sent message once sealed: reusing its buffer changes nothing the peer reads', async () => {
    const { initiated, accepted } = await pair();
    const [harnessStream, { stream: executorStream }] = await Promise.all([initiated, accepted]);
    const received: string[] = [];
    harnessStream.start({ onMessage: (m) => received.push(String(m)), onClose: () => {}, onDrain: () => {} });
    executorStream.start({ onMessage: () => {}, onClose: () => {}, onDrain: () => {} });
    const message = Buffer.from(JSON.stringify({ method: 'n', params: { text: 'y'.repeat(100 * 1024) } }));
    const expected = message.toString();
    let released = 0;
    executorStream.send(message, () => released++);
    expect(released).toBe(1);
    message.fill(0x20);
    await new Promise((r) => setTimeout(r, 20));
    expect(received).toEqual([expected]);
    harnessStream.close();
    executorStream.close();
  });

  it('seals records into pooled frame buffers, reused once written, without corrupting anything', async () => {
    const { initiated, accepted, harnessSent } = await pair();
    const { harnessStream, executorStream, received } = await startStreams(initiated, accepted);
    const messages = Array.from({ length: 8 }, (_, i) =>
      JSON.stringify({ method: 'n', params: { text: String.fromCharCode(97 + i).repeat(150 * 1024) } }),
    );
    for (const message of messages) {
      harnessStream.send(message);
      await new Promise((r) => setTimeout(r, 5)); // delivered (and so released) before the next
    }
    await new Promise((r) => setTimeout(r, 20));
    expect(received).toEqual(messages);
    // Later records were sealed into the buffers of earlier ones.
    const buffers = harnessSent.flatMap((f) => (f.kind === 'data' ? [f.payload.buffer] : []));
    expect(buffers.length).toBeGreaterThanOrEqual(24);
    expect(new Set(buffers).size).toBeLessThan(buffers.length / 2);
    harnessStream.close();
    executorStream.close();
  });

  it('opens a one-record message into a pooled buffer whose release comes with the message and serves the next', async () => {
    const { initiated, accepted } = await pair();
    const [harnessStream, { stream: executorStream }] = await Promise.all([initiated, accepted]);
    const received: Buffer[] = [];
    const releases: Array<(() => void) | undefined> = [];
    harnessStream.start({
      onMessage: (m, release) => {
        received.push(m as Buffer);
        releases.push(release);
      },
      onClose: () => {},
      onDrain: () => {},
    });
    executorStream.start({ onMessage: () => {}, onClose: () => {}, onDrain: () => {} });
    // ~40 KB each: one record a message, over the size from which messages are pooled.
    const texts = ['a', 'b', 'c'].map((c) => JSON.stringify({ method: 'n', params: { text: c.repeat(40_000) } }));
    for (const text of texts) {
      executorStream.send(text);
      await new Promise((r) => setTimeout(r, 5));
      const message = received.at(-1)!;
      expect(message.toString()).toBe(text);
      expect(releases.at(-1)).toBeTypeOf('function');
      releases.at(-1)?.(); // its last user: the slab goes back to the stream's message pool
      expect(harnessStream.bufferPools.messages.pooledBytes).toBeGreaterThan(0);
    }
    // Each message reused the slab the one before it gave back.
    expect(new Set(received.map((m) => m.buffer)).size).toBe(1);
    harnessStream.close();
    executorStream.close();
  });

  it('speaks the ChaChaPoly suite when the executor identity uses it', async () => {
    const [harnessSide, executorSide] = createMemoryLinkPair();
    const executor = generateIdentity({ suite: SUITE_HYBRID_CHACHAPOLY });
    const streamId = randomUUID();
    let accepted: ReturnType<typeof SecureStream.accept> | undefined;
    executorSide.start({
      onFrame: (frame) => {
        if (frame.kind === 'handshake') {
          accepted = SecureStream.accept({
            link: executorSide,
            streamId,
            ...ids,
            staticKeys: executor,
            message1: frame.payload,
            authorize: async () => true,
          });
        }
      },
      onClose: () => {},
      onDrain: () => {},
    });
    const harnessStream = await SecureStream.initiate({
      link: harnessSide,
      streamId,
      ...ids,
      staticKeys: generateIdentity({ suite: SUITE_HYBRID_CHACHAPOLY }),
      remoteStatic: executor.publicKey,
      authorization: 't',
    });
    const { stream } = await accepted!;
    const got = new Promise<string>((resolve) =>
      stream.start({ onMessage: (m) => resolve(m.toString()), onClose: () => {}, onDrain: () => {} }),
    );
    harnessStream.start({ onMessage: () => {}, onClose: () => {}, onDrain: () => {} });
    harnessStream.send('{"suite":"chacha"}');
    await expect(got).resolves.toBe('{"suite":"chacha"}');
  });

  it('resets the stream when the executor refuses the authorization', async () => {
    const { initiated, accepted } = await pair({ authorize: async () => false });
    await expect(accepted).rejects.toMatchObject({ name: SecureStreamError.NAME, code: 'unauthorized' });
    await expect(initiated).rejects.toMatchObject({ code: 'reset' });
  });

  it('fails when the harness pinned the wrong executor key', async () => {
    const { initiated, accepted } = await pair({ executorKeyForHarness: generateIdentity() });
    await expect(accepted).rejects.toMatchObject({ code: 'handshake_failed' });
    await expect(initiated).rejects.toBeInstanceOf(SecureStreamError);
  });

  it('kills the stream on a tampered record: no plaintext fallback', async () => {
    let tamper = false;
    const { initiated, accepted } = await pair({
      harnessRewrite: (frame) => {
        if (!tamper || frame.kind !== 'data') return frame;
        const payload = Uint8Array.from(frame.payload);
        payload[payload.length - 1]! ^= 1;
        return dataFrame(frame.streamId, frame.seq, payload);
      },
    });
    const { harnessStream, received, closed } = await startStreams(initiated, accepted);
    tamper = true;
    harnessStream.send('{"method":"x"}');
    await expect(closed).resolves.toMatch(/inbound record rejected/);
    expect(received).toEqual([]);
  });

  it('drops duplicated records and reorders swapped ones within the window', async () => {
    let held: Frame | null = null;
    let mode: 'pass' | 'duplicate' | 'swap' = 'pass';
    const { initiated, accepted } = await pair();
    const { harnessStream, executorStream, received } = await startStreams(initiated, accepted);
    const link = (harnessStream as unknown as { link: FrameLink }).link;
    const realSend = link.send.bind(link);
    link.send = (frame: Frame) => {
      if (frame.kind !== 'data') return realSend(frame);
      if (mode === 'duplicate') {
        realSend(frame);
        return realSend(frame);
      }
      if (mode === 'swap') {
        if (!held) {
          held = frame;
          return true;
        }
        realSend(frame);
        const first = held;
        held = null;
        return realSend(first);
      }
      return realSend(frame);
    };
    mode = 'duplicate';
    harnessStream.send('{"n":1}');
    mode = 'swap';
    harnessStream.send('{"n":2}');
    harnessStream.send('{"n":3}');
    mode = 'pass';
    harnessStream.send('{"n":4}');
    await expect.poll(() => received.length).toBe(4);
    expect(received).toEqual(['{"n":1}', '{"n":2}', '{"n":3}', '{"n":4}']);
    expect(executorStream.status).toBe('open');
  });

  it('copies a record it parks out of order: the buffer it arrived in may be reused at once', async () => {
    let held: Frame | null = null;
    const { initiated, accepted } = await pair();
    const { harnessStream, executorStream, received } = await startStreams(initiated, accepted);
    // The executor's link delivers every Data payload as a view of one Buffer, scribbled over after each
    // frame, as a socket reading into one reused buffer would.
    const inbound = (executorStream as unknown as { link: { handlers: { onFrame(frame: Frame): void } } }).link;
    const deliver = inbound.handlers.onFrame;
    const scratch = Buffer.alloc(64 * 1024);
    inbound.handlers.onFrame = (frame: Frame) => {
      if (frame.kind !== 'data') return deliver(frame);
      scratch.set(frame.payload);
      deliver({ ...frame, payload: scratch.subarray(0, frame.payload.byteLength) });
      scratch.fill(0xee);
    };
    const link = (harnessStream as unknown as { link: FrameLink }).link;
    const realSend = link.send.bind(link);
    link.send = (frame: Frame) => {
      if (frame.kind !== 'data') return realSend(frame);
      if (!held) {
        held = frame;
        return true;
      }
      realSend(frame); // the second record first: it is parked until the first arrives
      return realSend(held);
    };
    harnessStream.send('{"n":1}');
    harnessStream.send('{"n":2}');
    await expect.poll(() => received.length).toBe(2);
    expect(received).toEqual(['{"n":1}', '{"n":2}']);
    expect(executorStream.status).toBe('open');
  });

  it('treats Data before the handshake as fatal on the harness side', async () => {
    const [harnessSide, executorSide] = createMemoryLinkPair();
    const executorFrames: Frame[] = [];
    executorSide.start({
      onFrame: (frame) => {
        executorFrames.push(frame);
        if (frame.kind === 'handshake') executorSide.send(dataFrame(frame.streamId, 0, new Uint8Array([1, 2, 3])));
      },
      onClose: () => {},
      onDrain: () => {},
    });
    const streamId = randomUUID();
    const stream = SecureStream.initiate({
      link: harnessSide,
      streamId,
      ...ids,
      staticKeys: generateIdentity(),
      remoteStatic: generateIdentity().publicKey,
      authorization: 't',
    });
    await expect(stream).rejects.toMatchObject({ code: 'protocol' });
    await expect
      .poll(() => executorFrames.find((f) => f.kind === 'reset'))
      .toMatchObject({ kind: 'reset', reason: PROTOCOL_ERROR_RESET });
  });

  it('gives up a handshake nobody answers', async () => {
    const [harnessSide, executorSide] = createMemoryLinkPair();
    executorSide.start({ onFrame: () => {}, onClose: () => {}, onDrain: () => {} });
    const stream = SecureStream.initiate({
      link: harnessSide,
      streamId: randomUUID(),
      ...ids,
      staticKeys: generateIdentity(),
      remoteStatic: generateIdentity().publicKey,
      authorization: 't',
      timeoutMs: 50,
    });
    await expect(stream).rejects.toMatchObject({ code: 'timeout' });
  });

  /**
   * A harness link whose socket hands over, in the same read as message 2, the stream's end: the relay's Reset
   * (its environment socket went while message 2 was on its way) or the socket's close. A socket delivers every
   * frame of one read before any promise continuation runs, so the stream ends between message 2 resolving the
   * handshake's wait and `initiate` opening the stream.
   */
  function endingRightAfterMessage2(link: FrameLink, end: 'reset' | 'close'): FrameLink {
    return {
      start: (handlers) =>
        link.start({
          ...handlers,
          onFrame: (frame) => {
            handlers.onFrame(frame);
            if (frame.kind !== 'handshake') return;
            if (end === 'reset') handlers.onFrame(resetFrame(frame.streamId, 'environment_closed'));
            else handlers.onClose('relay socket closed (1006)');
          },
        }),
      send: (frame, release) => link.send(frame, release),
      get bufferedAmount() {
        return link.bufferedAmount;
      },
      pause: () => link.pause(),
      resume: () => link.resume(),
      close: (reason) => link.close(reason),
    };
  }

  for (const end of ['reset', 'close'] as const) {
    it(`fails the handshake when the stream ends (${end}) in the same read as message 2, instead of opening a stream that is gone`, async () => {
      const [harnessSide, executorSide] = createMemoryLinkPair();
      const { initiated, accepted } = await pairOver(endingRightAfterMessage2(harnessSide, end), executorSide);
      await accepted;
      const outcome = await initiated.then(
        (stream) => {
          // What a caller saw before: an open stream whose close no one reports and whose sends go nowhere, so
          // the `initialize` sent on it waited for its call timeout (60 s) with nothing on the wire.
          const closed = new Promise<string>((resolve) =>
            stream.start({ onMessage: () => {}, onClose: resolve, onDrain: () => {} }),
          );
          const told = Promise.race([closed, new Promise((resolve) => setTimeout(() => resolve('never told'), 200))]);
          return told.then((close) => ({ opened: stream.status, sent: stream.send('{"id":1}'), close }));
        },
        (err: unknown) => err,
      );
      expect(outcome).toBeInstanceOf(SecureStreamError);
      expect(outcome).toMatchObject(
        end === 'reset' ? { code: 'reset', resetReason: 'environment_closed' } : { code: 'closed' },
      );
    });
  }

  it('rejects a second Handshake frame after the stream is open', async () => {
    const { initiated, accepted } = await pair();
    const [harnessStream, { stream: executorStream }] = await Promise.all([initiated, accepted]);
    const closed = new Promise<string>((resolve) =>
      harnessStream.start({ onMessage: () => {}, onClose: resolve, onDrain: () => {} }),
    );
    executorStream.start({ onMessage: () => {}, onClose: () => {}, onDrain: () => {} });
    // Reach under the stream to send a stray handshake on its link, as a confused peer would.
    (executorStream as unknown as { link: FrameLink }).link.send(
      handshakeFrame(harnessStream.streamId, new Uint8Array([9])),
    );
    await expect(closed).resolves.toMatch(/unexpected handshake frame/);
  });
});
