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
  oneShotAead,
  SUITE_HYBRID_AESGCM,
  SUITE_HYBRID_CHACHAPOLY,
  type Suite,
  suiteInfo,
  TAG_LENGTH_BYTES,
} from '@tether/noise';
import { MAX_RECORD_PLAINTEXT_BYTES, MESSAGE_LENGTH_PREFIX_BYTES } from '@tether/relay-frames';
import { createMemoryLinkPair } from './src/link.js';
import { SecureStream } from './src/secure-stream.js';

const MESSAGE_BYTES = 64 * 1024;

/** Throughput by wall clock and by this process's CPU time (all its threads, GC helpers included). */
interface Rate {
  wall: number;
  cpu: number;
}

function startClock(): (bytes: number) => Rate {
  const wall0 = performance.now();
  const cpu0 = process.cpuUsage();
  return (bytes: number) => {
    const cpu = process.cpuUsage(cpu0);
    return {
      wall: bytes / 1e6 / ((performance.now() - wall0) / 1000),
      cpu: bytes / 1e6 / ((cpu.user + cpu.system) / 1e6),
    };
  };
}

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

async function streamMBps(suite: Suite, provider: CryptoProvider, seconds: number): Promise<Rate> {
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
  const stop = startClock();
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
  const rate = stop(received);
  harnessStream.close();
  return rate;
}

/**
 * The physical limit: seal then open, with the same provider, of exactly the records the stream sends
 * for one message (the 4-byte prefix plus 64 KiB cut at 61 440 bytes: one full record and one of 4 100
 * bytes). The format caps a record at 60 KiB, so no implementation can seal a 64 KiB message with fewer
 * AEAD setups than this. It uses the provider's fastest path, as the stream does: the key bound once
 * (`keyedAead`, a KeyObject on node) when the provider has it. Each seal writes a fresh ciphertext
 * buffer, as `encrypt` returns one (and as a record handed to a socket needs); `--raw=reuse` seals into
 * one reused buffer instead, a stricter limit no sender can reach.
 */
function rawAeadMBps(suite: Suite, provider: CryptoProvider, seconds: number): Rate {
  const cipher = suiteInfo(suite).cipher;
  const key = new Uint8Array(32).fill(7);
  const aead = provider.keyedAead?.(cipher, key) ?? oneShotAead(provider, cipher, key);
  const nonce = new Uint8Array(12);
  const ad = new Uint8Array(0);
  const records = recordSizes(MESSAGE_BYTES).map((size) => [new Uint8Array(size).fill(65)]);
  const reused = records.map(([record]) => new Uint8Array(record!.byteLength + TAG_LENGTH_BYTES));
  let bytes = 0;
  const t0 = performance.now();
  const stop = startClock();
  while (performance.now() - t0 < seconds * 1000) {
    for (let i = 0; i < records.length; i++) {
      const sealed = RAW_REUSE ? reused[i]! : new Uint8Array(reused[i]!.byteLength);
      aead.sealInto(nonce, ad, records[i]!, sealed);
      aead.open(nonce, ad, sealed);
    }
    bytes += MESSAGE_BYTES;
  }
  return stop(bytes);
}

/** For reference only: one seal+open of the whole 64 KiB message as a single buffer (not a legal record). */
function rawOneBufferMBps(suite: Suite, provider: CryptoProvider, seconds: number): number {
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

/** Plaintext record sizes of one framed message (rendezvous.md §3.5). */
function recordSizes(messageBytes: number): number[] {
  const sizes: number[] = [];
  for (let left = MESSAGE_LENGTH_PREFIX_BYTES + messageBytes; left > 0; left -= MAX_RECORD_PLAINTEXT_BYTES) {
    sizes.push(Math.min(left, MAX_RECORD_PLAINTEXT_BYTES));
  }
  return sizes;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

// Usage: bench.ts [--rounds=N] [--only=AESGCM/node] [--raw=reuse]. The machine is shared, so stream and raw are
// measured in alternating short rounds (each sees the same load) and each column is the median.
const args = new Map(
  process.argv.slice(2).map((arg) => {
    const [k, v] = arg.replace(/^--/, '').split('=');
    return [k!, v ?? ''];
  }),
);
const ROUNDS = Number(args.get('rounds') ?? 5);
const only = args.get('only');
const RAW_REUSE = args.get('raw') === 'reuse';

const rows: string[] = [];
for (const suite of [SUITE_HYBRID_AESGCM, SUITE_HYBRID_CHACHAPOLY]) {
  for (const [name, provider, seconds] of [
    ['node', createNodeProvider(), 0.5],
    ['portable', createPortableProvider(), 0.3],
  ] as const) {
    const cipher = suiteInfo(suite).cipher;
    if (only && only !== `${cipher}/${name}`) continue;
    const stream: Rate[] = [];
    const raw: Rate[] = [];
    const oneBuffer: number[] = [];
    // Warm-up round (JIT, first handshake), not counted.
    await streamMBps(suite, provider, seconds / 2);
    rawAeadMBps(suite, provider, seconds / 2);
    for (let round = 0; round < ROUNDS; round++) {
      stream.push(await streamMBps(suite, provider, seconds));
      raw.push(rawAeadMBps(suite, provider, seconds));
      oneBuffer.push(rawOneBufferMBps(suite, provider, seconds / 2));
    }
    const pct = (x: number) => `${(100 * x).toFixed(0)} %`;
    const wallRatio = stream.map((s, i) => s.wall / raw[i]!.wall);
    const cpuRatio = stream.map((s, i) => s.cpu / raw[i]!.cpu);
    const range = (xs: number[]) => `${pct(Math.min(...xs))}–${pct(Math.max(...xs))}`;
    rows.push(
      `| ${cipher} | ${name} | ${median(stream.map((s) => s.wall)).toFixed(0)} | ${median(raw.map((r) => r.wall)).toFixed(0)} | ${pct(median(wallRatio))} (${range(wallRatio)}) | ${pct(median(cpuRatio))} (${range(cpuRatio)}) | ${median(oneBuffer).toFixed(0)} |`,
    );
  }
}
console.log(
  `Node ${process.version}; 64 KiB JSON-RPC messages, harness → executor, one process, frames through the protobuf codec.\n`,
);
console.log(
  `${ROUNDS} alternating rounds per row; medians. Raw = seal+open of the same records (61 440 + 4 100 bytes per message), ${RAW_REUSE ? 'sealed into one reused buffer' : 'each sealed into a fresh buffer'}.\n`,
);
console.log(
  '| cipher | provider | secure stream MB/s | raw AEAD seal+open MB/s | stream / raw, wall clock (range) | stream / raw, CPU time (range) | raw, one 64 KiB buffer MB/s |',
);
console.log('|---|---|---:|---:|---:|---:|---:|');
console.log(rows.join('\n'));
