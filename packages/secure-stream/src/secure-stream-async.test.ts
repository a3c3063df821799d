import { type AesGcmSubtle, createWebCryptoProvider } from '@tether/noise';
import { dataFrame } from '@tether/relay-frames';
import { describe, expect, it } from 'vitest';
import { pair, pairOver, startStreams } from './__tests__/pairs.js';
import { createMemoryLinkPair, type FrameLink } from './link.js';

describe('SecureStream', () => {
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
      const { harnessStream, executorStream, received } = await startStreams(initiated, accepted);
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
      const { harnessStream, received } = await startStreams(initiated, accepted);
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
      const { harnessStream, executorStream, received, closed } = await startStreams(initiated, accepted);
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
