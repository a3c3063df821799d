/**
 * Secure-stream throughput: 64 KiB JSON-RPC messages through a whole SecureStream pair (length prefix,
 * 60 KiB records, AEAD, protobuf frames, ordered window, reassembly), per suite and provider, against
 * the raw AEAD seal+open speed of the same provider (the physical limit).
 *
 *   cd packages/secure-stream && node --conditions=tether-source --import tsx bench.ts
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { TransportHandlers } from '@tether/jsonrpc';
import {
  type CryptoProvider,
  createNodeProvider,
  createPortableProvider,
  generateIdentity,
  SUITE_HYBRID_AESGCM,
  SUITE_HYBRID_CHACHAPOLY,
  type Suite,
  suiteInfo,
} from '@tether/noise';
import { createMemoryLinkPair } from './src/link.js';
import { SecureStream } from './src/secure-stream.js';

const MESSAGE_BYTES = 64 * 1024;

async function streamPair(suite: Suite, provider: CryptoProvider) {
  const [harnessLink, executorLink] = createMemoryLinkPair();
  const executor = generateIdentity({ suite, provider });
  const harness = generateIdentity({ suite, provider });
  const streamId = randomUUID();
  const ids = { environmentId: 'env', registrationId: 'reg', streamId };
  let accept: Promise<Awaited<ReturnType<typeof SecureStream.accept>>> | null = null;
  executorLink.start({
    onFrame: (frame) => {
      if (frame.kind === 'handshake' && !accept) {
        accept = SecureStream.accept({
          link: executorLink,
          ...ids,
          staticKeys: executor,
          provider,
          message1: frame.payload,
          authorize: async () => true,
        });
      }
    },
    onClose: () => {},
    onDrain: () => {},
  });
  const harnessStream = await SecureStream.initiate({
    link: harnessLink,
    ...ids,
    staticKeys: harness,
    remoteStatic: executor.publicKey,
    authorization: 'bench',
    provider,
  });
  const { stream: executorStream } = await accept!;
  return { harnessStream, executorStream };
}

async function streamMBps(suite: Suite, provider: CryptoProvider, seconds: number): Promise<number> {
  const { harnessStream, executorStream } = await streamPair(suite, provider);
  const message = Buffer.from(
    JSON.stringify({ method: 'process/write', params: { chunk: 'A'.repeat(MESSAGE_BYTES - 60) } }),
  );
  let received = 0;
  let wake: (() => void) | null = null;
  const handlers: TransportHandlers = {
    onMessage: (m) => {
      received += m.length;
      wake?.();
    },
    onClose: () => {},
    onDrain: () => {},
  };
  executorStream.start(handlers);
  harnessStream.start({ onMessage: () => {}, onClose: () => {}, onDrain: () => {} });
  // Batches of 32 messages; each batch is fully received before the next is sent (frames are
  // delivered through the codec on later event-loop turns, as from a socket).
  const t0 = performance.now();
  while (performance.now() - t0 < seconds * 1000) {
    const target = received + 32 * message.length;
    const arrived = new Promise<void>((resolve) => {
      wake = () => {
        if (received >= target) resolve();
      };
    });
    for (let i = 0; i < 32; i++) harnessStream.send(message);
    await arrived;
  }
  const elapsed = (performance.now() - t0) / 1000;
  harnessStream.close();
  return received / 1e6 / elapsed;
}

function rawAeadMBps(suite: Suite, provider: CryptoProvider, seconds: number): number {
  const cipher = suiteInfo(suite).cipher;
  const key = new Uint8Array(32).fill(7);
  const nonce = new Uint8Array(12);
  const plaintext = new Uint8Array(MESSAGE_BYTES).fill(65);
  const ad = new Uint8Array(0);
  let bytes = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < seconds * 1000) {
    const sealed = provider.encrypt(cipher, key, nonce, ad, plaintext);
    provider.decrypt(cipher, key, nonce, ad, sealed);
    bytes += plaintext.length;
  }
  return bytes / 1e6 / ((performance.now() - t0) / 1000);
}

const rows: string[] = [];
for (const suite of [SUITE_HYBRID_AESGCM, SUITE_HYBRID_CHACHAPOLY]) {
  for (const [name, provider, seconds] of [
    ['node', createNodeProvider(), 2],
    ['portable', createPortableProvider(), 1],
  ] as const) {
    const stream = await streamMBps(suite, provider, seconds);
    const raw = rawAeadMBps(suite, provider, seconds);
    rows.push(
      `| ${suiteInfo(suite).cipher} | ${name} | ${stream.toFixed(0)} | ${raw.toFixed(0)} | ${((100 * stream) / raw).toFixed(0)} % |`,
    );
  }
}
console.log(
  `Node ${process.version}; 64 KiB JSON-RPC messages, harness → executor, one process, frames through the protobuf codec.\n`,
);
console.log('| cipher | provider | secure stream MB/s | raw AEAD seal+open MB/s | stream / raw |');
console.log('|---|---|---:|---:|---:|');
console.log(rows.join('\n'));
