/** A harness and an executor SecureStream over a memory link pair, with the harness's frames watched. */
import { randomUUID } from 'node:crypto';
import { type CryptoProvider, generateIdentity, type NoiseIdentity } from '@tether/noise';
import type { Frame } from '@tether/relay-frames';
import { createMemoryLinkPair, type FrameLink } from '../link.js';
import type { SecureStreamPools } from '../options.js';
import { SecureStream } from '../secure-stream.js';

export const ids = { environmentId: 'env-1', registrationId: 'reg-1' };

/** Wraps a link to watch (and optionally rewrite) the frames one side sends. */
export function tap(link: FrameLink, rewrite?: (frame: Frame) => Frame | null): { link: FrameLink; sent: Frame[] } {
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

export interface PairOptions {
  authorize?: (authorization: string) => Promise<boolean>;
  harnessRewrite?: (frame: Frame) => Frame | null;
  executorKeyForHarness?: NoiseIdentity;
  harnessPools?: SecureStreamPools;
  /** The executor side's crypto provider (default: the node provider). */
  executorProvider?: CryptoProvider;
  /** The harness side's crypto provider (default: the node provider). */
  harnessProvider?: CryptoProvider;
}

export async function pair(options: PairOptions = {}) {
  const [harnessSide, executorSide] = createMemoryLinkPair();
  return pairOver(harnessSide, executorSide, options);
}

/** `pair` over the given links (the harness's may be a wrapper around one of a memory pair). */
export async function pairOver(harnessSide: FrameLink, executorSide: FrameLink, options: PairOptions = {}) {
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

/**
 * Both streams of a pair once the handshake is done, started: the executor's messages are collected as text
 * in `received`, `closed` resolves with the reason the executor's stream closed, and the harness's stream
 * ignores what it receives.
 */
export async function startStreams(
  initiated: Promise<SecureStream>,
  accepted: Promise<Awaited<ReturnType<typeof SecureStream.accept>>>,
) {
  const [harnessStream, { stream: executorStream }] = await Promise.all([initiated, accepted]);
  const received: string[] = [];
  const closed = new Promise<string>((resolve) =>
    executorStream.start({ onMessage: (m) => received.push(m.toString()), onClose: resolve, onDrain: () => {} }),
  );
  harnessStream.start({ onMessage: () => {}, onClose: () => {}, onDrain: () => {} });
  return { harnessStream, executorStream, received, closed };
}
