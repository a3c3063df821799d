import { randomUUID } from 'node:crypto';
import { BufferPool } from '@tether/bytes';
import { RpcClient, RpcConnection } from '@tether/jsonrpc';
import {
  type AesGcmSubtle,
  type CryptoProvider,
  createWebCryptoProvider,
  generateIdentity,
  type NoiseIdentity,
  SUITE_HYBRID_CHACHAPOLY,
} from '@tether/noise';
import { dataFrame, type Frame, handshakeFrame, resetFrame } from '@tether/relay-frames';
import { describe, expect, it } from 'vitest';
import { PROTOCOL_ERROR_RESET, SecureStreamError } from './errors.js';
import { createMemoryLinkPair, type FrameLink } from './link.js';
import type { SecureStreamPools } from './options.js';
import { SecureStream } from './secure-stream.js';

const ids = { environmentId: 'env-1', registrationId: 'reg-1' };

/** Wraps a link to watch (and optionally rewrite) the frames one side sends. */
function tap(link: FrameLink, rewrite?: (frame: Frame) => Frame | null): { link: FrameLink; sent: Frame[] } {
  const sent: Frame[] = [];
  return {
    sent,
    link: {
      start: (handlers) => link.start(handlers),
      send: (frame, release) => {
        sent.push(frame);
        const out = rewrite ? rewrite(frame) : frame;
        if (out) return link.send(out, release);
        release?.();
        return true;
      },
      get bufferedAmount() {
        return link.bufferedAmount;
      },
      pause: () => link.pause(),
      resume: () => link.resume(),
      close: (reason) => link.close(reason),
    },
  };
}

interface PairOptions {
  authorize?: (authorization: string) => Promise<boolean>;
  harnessRewrite?: (frame: Frame) => Frame | null;
  executorKeyForHarness?: NoiseIdentity;
  harnessPools?: SecureStreamPools;
  /** The executor side's crypto provider (default: the node provider). */
  executorProvider?: CryptoProvider;
  /** The harness side's crypto provider (default: the node provider). */
  harnessProvider?: CryptoProvider;
}

async function pair(options: PairOptions = {}) {
  const [harnessSide, executorSide] = createMemoryLinkPair();
  return pairOver(harnessSide, executorSide, options);
}

/** `pair` over the given links (the harness's may be a wrapper around one of a memory pair). */
async function pairOver(harnessSide: FrameLink, executorSide: FrameLink, options: PairOptions = {}) {
  const harness = generateIdentity();
  const executor = generateIdentity();
  const streamId = randomUUID();
  const harnessTap = tap(harnessSide, options.harnessRewrite);
  const seen: Array<{ authorization: string; harnessKey: Uint8Array }> = [];
  // The executor's demultiplexer hands the first Handshake frame's payload to accept().
  const accepted = new Promise<Awaited<ReturnType<typeof SecureStream.accept>>>((resolve, reject) => {
    executorSide.start({
      onFrame: (frame) => {
        if (frame.kind !== 'handshake') return;
        SecureStream.accept({
          link: executorSide,
          streamId,
          ...ids,
          staticKeys: executor,
          message1: frame.payload,
          ...(options.executorProvider ? { provider: options.executorProvider } : {}),
          authorize: async ({ remoteStatic, authorization }) => {
            seen.push({ authorization, harnessKey: remoteStatic.x25519 });
            return options.authorize ? options.authorize(authorization) : true;
          },
        }).then(resolve, reject);
      },
      onClose: () => {},
      onDrain: () => {},
    });
  });
  const initiated = SecureStream.initiate({
    link: harnessTap.link,
    streamId,
    ...ids,
    staticKeys: harness,
    remoteStatic: (options.executorKeyForHarness ?? executor).publicKey,
    authorization: 'token-123',
    timeoutMs: 5000,
    ...(options.harnessPools ? { pools: options.harnessPools } : {}),
    ...(options.harnessProvider ? { provider: options.harnessProvider } : {}),
  });
  return { initiated, accepted, seen, harness, harnessSent: harnessTap.sent };
}

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
    const [harnessStream, { stream: executorStream }] = await Promise.all([initiated, accepted]);
    const received: string[] = [];
    executorStream.start({ onMessage: (m) => received.push(String(m)), onClose: () => {}, onDrain: () => {} });
    harnessStream.start({ onMessage: () => {}, onClose: () => {}, onDrain: () => {} });
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
    const [harnessStream, { stream: executorStream }] = await Promise.all([initiated, accepted]);
    const received: string[] = [];
    const closed = new Promise<string>((resolve) =>
      executorStream.start({ onMessage: (m) => received.push(m.toString()), onClose: resolve, onDrain: () => {} }),
    );
    harnessStream.start({ onMessage: () => {}, onClose: () => {}, onDrain: () => {} });
    tamper = true;
    harnessStream.send('{"method":"x"}');
    await expect(closed).resolves.toMatch(/inbound record rejected/);
    expect(received).toEqual([]);
  });

  it('drops duplicated records and reorders swapped ones within the window', async () => {
    let held: Frame | null = null;
    let mode: 'pass' | 'duplicate' | 'swap' = 'pass';
    const { initiated, accepted } = await pair();
    const [harnessStream, { stream: executorStream }] = await Promise.all([initiated, accepted]);
    const received: string[] = [];
    executorStream.start({ onMessage: (m) => received.push(m.toString()), onClose: () => {}, onDrain: () => {} });
    harnessStream.start({ onMessage: () => {}, onClose: () => {}, onDrain: () => {} });
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
    const [harnessStream, { stream: executorStream }] = await Promise.all([initiated, accepted]);
    const received: string[] = [];
    executorStream.start({ onMessage: (m) => received.push(m.toString()), onClose: () => {}, onDrain: () => {} });
    harnessStream.start({ onMessage: () => {}, onClose: () => {}, onDrain: () => {} });
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

  describe('with an asynchronous AEAD (WebCrypto AES-GCM, as a browser opens records)', () => {
    /** Node's WebCrypto, with each decrypt's answer held back a random while: they settle out of order. */
    function shuffledSubtle(): { subtle: AesGcmSubtle; opened: () => number } {
      const real = globalThis.crypto.subtle as unknown as AesGcmSubtle;
      let opened = 0;
      return {
        opened: () => opened,
        subtle: {
          importKey: (...args) => real.importKey(...args),
          decrypt: async (...args) => {
            const plaintext = await real.decrypt(...args);
            await new Promise((resolve) => setTimeout(resolve, Math.random() * 5));
            opened += 1;
            return plaintext;
          },
          encrypt: async (...args) => {
            const ciphertext = await real.encrypt(...args);
            await new Promise((resolve) => setTimeout(resolve, Math.random() * 5));
            return ciphertext;
          },
        },
      };
    }

    it('opens records concurrently and delivers every message whole and in order', async () => {
      const shuffled = shuffledSubtle();
      const { initiated, accepted } = await pair({
        executorProvider: createWebCryptoProvider({ subtle: shuffled.subtle }),
      });
      const [harnessStream, { stream: executorStream }] = await Promise.all([initiated, accepted]);
      const received: string[] = [];
      executorStream.start({ onMessage: (m) => received.push(m.toString()), onClose: () => {}, onDrain: () => {} });
      harnessStream.start({ onMessage: () => {}, onClose: () => {}, onDrain: () => {} });
      // Tiny messages, one of exactly one whole record, and large ones over many records, interleaved.
      const sent: string[] = [];
      for (let i = 0; i < 40; i++) {
        const size = [10, 60 * 1024 - 64, 300 * 1024, 1][i % 4]!;
        const message = JSON.stringify({ i, pad: String.fromCharCode(97 + (i % 26)).repeat(size) });
        sent.push(message);
        harnessStream.send(message);
      }
      await expect.poll(() => received.length, { timeout: 10_000 }).toBe(sent.length);
      expect(received).toEqual(sent);
      expect(shuffled.opened()).toBeGreaterThan(sent.length); // the large ones took several records each
      expect(executorStream.status).toBe('open');
      harnessStream.close();
    });

    it('seals records concurrently and sends their frames in seq order; the peer reads every message in order', async () => {
      const { initiated, accepted, harnessSent } = await pair({
        harnessProvider: createWebCryptoProvider({ subtle: shuffledSubtle().subtle }),
      });
      const [harnessStream, { stream: executorStream }] = await Promise.all([initiated, accepted]);
      const received: string[] = [];
      executorStream.start({ onMessage: (m) => received.push(m.toString()), onClose: () => {}, onDrain: () => {} });
      harnessStream.start({ onMessage: () => {}, onClose: () => {}, onDrain: () => {} });
      const sent: string[] = [];
      for (let i = 0; i < 30; i++) {
        const message = JSON.stringify({ i, pad: 'y'.repeat([5, 200 * 1024, 60 * 1024 - 64][i % 3]!) });
        sent.push(message);
        // A reused buffer: sealing takes the bytes when called.
        const buffer = Buffer.from(message);
        harnessStream.send(buffer, () => buffer.fill(0));
      }
      expect(harnessStream.bufferedAmount).toBeGreaterThan(0); // still being sealed
      await expect.poll(() => received.length, { timeout: 10_000 }).toBe(sent.length);
      expect(received).toEqual(sent);
      const seqs = harnessSent.flatMap((f) => (f.kind === 'data' ? [f.seq] : []));
      expect(seqs).toEqual(seqs.map((_, i) => i));
      expect(harnessStream.bufferedAmount).toBe(0);
      harnessStream.close();
    });

    it('asks its caller to wait while the link is full or much is being sealed, and always wakes it', async () => {
      // A link that says it is full on every 7th frame and drains a little later, as a socket would.
      const [harnessSide, executorSide] = createMemoryLinkPair();
      let frames = 0;
      let drains = 0;
      let linkHandlers: Parameters<FrameLink['start']>[0] | null = null;
      const congested: FrameLink = {
        start: (handlers) => {
          linkHandlers = handlers;
          harnessSide.start(handlers);
        },
        send: (frame, release) => {
          const ok = harnessSide.send(frame, release);
          if (frame.kind !== 'data' || ++frames % 7 !== 0) return ok;
          setTimeout(() => {
            drains += 1;
            linkHandlers?.onDrain();
          }, 2);
          return false;
        },
        bufferedAmount: 0,
        pause: () => harnessSide.pause(),
        resume: () => harnessSide.resume(),
        close: (reason) => harnessSide.close(reason),
      };
      const { initiated, accepted } = await pairOver(congested, executorSide, {
        harnessProvider: createWebCryptoProvider({ subtle: shuffledSubtle().subtle }),
      });
      const [harnessStream, { stream: executorStream }] = await Promise.all([initiated, accepted]);
      let bytes = 0;
      executorStream.start({ onMessage: (m) => (bytes += Buffer.byteLength(m)), onClose: () => {}, onDrain: () => {} });
      let wake: (() => void) | null = null;
      let told = 0;
      harnessStream.start({ onMessage: () => {}, onClose: () => {}, onDrain: () => wake?.() });
      const message = Buffer.alloc(256 * 1024, 0x61);
      const total = 96; // 24 MiB: past the sealing high-water mark many times over
      for (let i = 0; i < total; i++) {
        if (!harnessStream.send(message)) {
          told += 1;
          await new Promise<void>((resolve) => {
            wake = resolve;
          });
          wake = null;
        }
      }
      await expect.poll(() => bytes, { timeout: 20_000 }).toBe(total * message.byteLength);
      expect(told).toBeGreaterThan(0);
      expect(drains).toBeGreaterThan(0);
      harnessStream.close();
    });

    it('sends the records still being sealed before it closes', async () => {
      const { initiated, accepted } = await pair({
        harnessProvider: createWebCryptoProvider({ subtle: shuffledSubtle().subtle }),
      });
      const [harnessStream, { stream: executorStream }] = await Promise.all([initiated, accepted]);
      const received: string[] = [];
      const closed = new Promise<string>((resolve) =>
        executorStream.start({ onMessage: (m) => received.push(m.toString()), onClose: resolve, onDrain: () => {} }),
      );
      const harnessClosed = new Promise<string>((resolve) =>
        harnessStream.start({ onMessage: () => {}, onClose: resolve, onDrain: () => {} }),
      );
      for (let n = 0; n < 10; n++) harnessStream.send(`{"n":${n}}`);
      harnessStream.close();
      expect(harnessStream.send('{"late":true}')).toBe(false); // closing: nothing new is taken
      await expect(harnessClosed).resolves.toBe('closed');
      await closed;
      expect(received).toEqual(Array.from({ length: 10 }, (_, n) => `{"n":${n}}`));
    });

    it('resets the stream on a tampered record, delivering what came before it and nothing after', async () => {
      let tamperSeq = -1;
      const { initiated, accepted } = await pair({
        executorProvider: createWebCryptoProvider({ subtle: shuffledSubtle().subtle }),
        harnessRewrite: (frame) => {
          if (frame.kind !== 'data' || frame.seq !== tamperSeq) return frame;
          const payload = Uint8Array.from(frame.payload);
          payload[3]! ^= 1;
          return dataFrame(frame.streamId, frame.seq, payload);
        },
      });
      const [harnessStream, { stream: executorStream }] = await Promise.all([initiated, accepted]);
      const received: string[] = [];
      const closed = new Promise<string>((resolve) =>
        executorStream.start({ onMessage: (m) => received.push(m.toString()), onClose: resolve, onDrain: () => {} }),
      );
      harnessStream.start({ onMessage: () => {}, onClose: () => {}, onDrain: () => {} });
      tamperSeq = 5;
      for (let n = 0; n < 10; n++) harnessStream.send(`{"n":${n}}`);
      await expect(closed).resolves.toMatch(/inbound record rejected/);
      expect(received).toEqual([0, 1, 2, 3, 4].map((n) => `{"n":${n}}`));
      expect(executorStream.status).toBe('closed');
    });

    it('delivers nothing once closed, though records were still being opened', async () => {
      const { initiated, accepted } = await pair({
        executorProvider: createWebCryptoProvider({ subtle: shuffledSubtle().subtle }),
      });
      const [harnessStream, { stream: executorStream }] = await Promise.all([initiated, accepted]);
      const received: string[] = [];
      executorStream.start({
        onMessage: (m) => {
          received.push(m.toString());
          if (received.length === 3) executorStream.close();
        },
        onClose: () => {},
        onDrain: () => {},
      });
      harnessStream.start({ onMessage: () => {}, onClose: () => {}, onDrain: () => {} });
      for (let n = 0; n < 20; n++) harnessStream.send(`{"n":${n}}`);
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(received).toEqual([0, 1, 2].map((n) => `{"n":${n}}`));
    });
  });
});
