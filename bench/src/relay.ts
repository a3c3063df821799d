/**
 * `pnpm bench` (relay section; alone: `pnpm --filter @tether/bench bench:relay`): the relay (its built bin, in
 * its own process) side by side with a direct WebSocket between the same two endpoints, same run. Prints a
 * table and writes bench/results/relay-latest.json.
 *
 *   BENCH_RELAY_MIB=256 BENCH_RELAY_ROUNDS=2000 BENCH_RELAY_IDLE_STREAMS=10000 BENCH_RELAY_REPEATS=5 pnpm bench
 */

import { type ChildProcess, spawn } from 'node:child_process';
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { type SigningKey, signRelayUrl } from '@tether/relay-auth';
import { dataFrame, decodeFrame, encodeFrame, handshakeFrame, resumeFrame } from '@tether/relay-frames';
import { repoRoot } from '@tether/test-kit';
import { WebSocket, WebSocketServer } from 'ws';

const TOTAL_MIB = Number(process.env.BENCH_RELAY_MIB ?? 256);
const ROUNDS = Number(process.env.BENCH_RELAY_ROUNDS ?? 2000);
const IDLE_STREAMS = Number(process.env.BENCH_RELAY_IDLE_STREAMS ?? 10_000);
const IDLE_ENVIRONMENTS = 100;
const FRAME_BYTES = 64 * 1024;
const FANOUT = 32;
const REPEATS = Number(process.env.BENCH_RELAY_REPEATS ?? 5);
/**
 * Bytes in flight (sent, not yet received) the sender allows, like a reader's window: without one, a sender
 * faster than its receiver makes the relay reset the stream (`relay_backpressure`, at 4 MiB queued), as designed.
 */
const WINDOW_BYTES = 3 * 1024 * 1024;

const pair = generateKeyPairSync('ed25519');
const key: SigningKey = { privateKey: pair.privateKey, publicKey: pair.publicKey };
const tick = () => new Promise<void>((resolve) => setImmediate(resolve));
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] as number;
const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
};

function url(base: string, role: 'environment' | 'harness', environmentId: string): string {
  const expiresAt = Math.floor(Date.now() / 1000) + 3600;
  return signRelayUrl(base, { role, environmentId, registrationId: 'reg-bench', epoch: 1, expiresAt }, key);
}

async function dial(target: string): Promise<WebSocket> {
  const ws = new WebSocket(target, { perMessageDeflate: false, maxPayload: 256 * 1024 });
  await once(ws, 'open');
  return ws;
}

// The relay under test: its built bin in a child process -------------------------------------------------

interface RelayProcess {
  url: string;
  child: ChildProcess;
  rssKiB(): number;
  /** CPU seconds (user + system) the relay process used so far. */
  cpuSeconds(): number;
  close(): Promise<void>;
}

async function startRelayProcess(): Promise<RelayProcess> {
  const dir = mkdtempSync(join(tmpdir(), 'relay-bench-'));
  const pem = join(dir, 'registry.pub.pem');
  writeFileSync(pem, key.publicKey.export({ type: 'spki', format: 'pem' }) as string);
  const child = spawn(
    process.execPath,
    [
      ...(process.env.BENCH_RELAY_NODE_ARGS ?? '').split(' ').filter(Boolean),
      join(repoRoot(), 'apps', 'relay', 'dist', 'main.js'),
      'serve',
      '--listen',
      '127.0.0.1:0',
      '--registry-key-file',
      pem,
      '--max-connections-per-ip',
      String(IDLE_STREAMS + IDLE_ENVIRONMENTS + 100),
      '--log-level',
      'warn',
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let stdout = '';
  const relayUrl = await new Promise<string>((resolve, reject) => {
    child.stdout?.on('data', (d) => {
      stdout += d;
      if (stdout.includes('\n')) resolve(stdout.split('\n')[0] as string);
    });
    child.once('exit', (code) => reject(new Error(`relay exited ${code}`)));
  });
  return {
    url: relayUrl,
    child,
    cpuSeconds: () => {
      const stat = readFileSync(`/proc/${child.pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      return (Number(fields[11]) + Number(fields[12])) / 100;
    },
    rssKiB: () => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))?.[1]),
    close: async () => {
      if (child.exitCode === null) {
        child.kill('SIGTERM');
        await once(child, 'exit');
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

// Two endpoints, paired either through the relay or directly ---------------------------------------------

interface Pairing {
  /** The sending side (an environment socket, or the server side of direct sockets), one per stream. */
  senders: WebSocket[];
  /** The receiving side, one per stream. */
  receivers: WebSocket[];
  /** One encoded Data frame per stream, routed to that stream's receiver. */
  frames: Buffer[];
  close(): Promise<void>;
}

async function viaRelay(relayUrl: string, streams: number): Promise<Pairing> {
  const environmentId = `bench-${randomUUID().slice(0, 8)}`;
  const env = await dial(url(relayUrl, 'environment', environmentId));
  const receivers: WebSocket[] = [];
  const frames: Buffer[] = [];
  const claimed = new Set<string>();
  env.on('message', (data: Buffer) => {
    // The environment sees each claim (Resume) before any traffic; remember the stream ids.
    claimed.add(data.toString('latin1'));
  });
  for (let i = 0; i < streams; i++) {
    const streamId = randomUUID();
    const harness = await dial(url(relayUrl, 'harness', environmentId));
    harness.send(encodeFrame(resumeFrame(streamId, 0)));
    receivers.push(harness);
    frames.push(Buffer.from(encodeFrame(dataFrame(streamId, 1, Buffer.alloc(FRAME_BYTES, i)))));
  }
  while (claimed.size < streams) await tick();
  env.removeAllListeners('message');
  // Answer every handshake so the streams are past the handshake stage, as in a real session.
  for (const frame of frames) env.send(encodeFrame(handshakeFrame(decodeFrame(frame).streamId, Buffer.from('m2'))));
  await Promise.all(receivers.map((r) => once(r, 'message')));
  return {
    senders: receivers.map(() => env),
    receivers,
    frames,
    close: async () => {
      for (const ws of [env, ...receivers]) ws.close();
      await Promise.all([env, ...receivers].map((ws) => (ws.readyState === 3 ? null : once(ws, 'close'))));
    },
  };
}

/**
 * The same two endpoints without the relay: the environment dials the harness directly (one socket per stream).
 * The environment stays the WebSocket client, as it is towards the relay, so it masks its frames in both runs.
 */
async function direct(streams: number): Promise<Pairing> {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false, maxPayload: 256 * 1024 });
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const receivers: WebSocket[] = [];
  server.on('connection', (ws) => receivers.push(ws));
  const senders: WebSocket[] = [];
  const frames: Buffer[] = [];
  for (let i = 0; i < streams; i++) {
    senders.push(await dial(`ws://127.0.0.1:${port}`));
    while (receivers.length <= i) await tick();
    frames.push(Buffer.from(encodeFrame(dataFrame(randomUUID(), 1, Buffer.alloc(FRAME_BYTES, i)))));
  }
  return {
    senders,
    receivers,
    frames,
    close: async () => {
      for (const ws of senders) ws.close();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** MB/s of 64 KiB Data frames from the senders to the receivers, round-robin over the streams. */
async function throughput(p: Pairing): Promise<number> {
  const totalFrames = Math.floor((TOTAL_MIB * 1024 * 1024) / FRAME_BYTES);
  let received = 0;
  let bytes = 0;
  let wake: (() => void) | null = null;
  let resolveDone: () => void = () => {};
  const done = new Promise<void>((resolve) => {
    resolveDone = resolve;
  });
  for (const receiver of p.receivers) {
    receiver.on('message', (data: Buffer) => {
      bytes += data.length;
      if (++received === totalFrames) resolveDone();
      if (wake) {
        const w = wake;
        wake = null;
        w();
      }
    });
  }
  const start = performance.now();
  for (let sent = 0; sent < totalFrames; sent++) {
    const stream = sent % p.frames.length;
    const frame = p.frames[stream] as Buffer;
    // Event-driven: wait for the receiver to take data, no polling.
    while (sent * frame.length - bytes > WINDOW_BYTES) {
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
    }
    (p.senders[stream] as WebSocket).send(frame, { binary: true });
  }
  await done;
  const seconds = (performance.now() - start) / 1000;
  for (const receiver of p.receivers) receiver.removeAllListeners('message');
  return bytes / 1e6 / seconds;
}

/** Round-trip times (ms) of a small frame: receiver → sender side → echoed back. */
async function roundTrips(p: Pairing): Promise<number[]> {
  const harness = p.receivers[0] as WebSocket;
  const env = p.senders[0] as WebSocket;
  // A 64-byte Data frame on the pairing's first stream (through the relay, the echo is routed by its stream id).
  const frame = Buffer.from(
    encodeFrame(dataFrame(decodeFrame(p.frames[0] as Buffer).streamId, 2, Buffer.alloc(64, 1))),
  );
  env.on('message', (data: Buffer) => env.send(data, { binary: true }));
  const times: number[] = [];
  for (let i = 0; i < ROUNDS + 200; i++) {
    const start = performance.now();
    const echoed = once(harness, 'message');
    harness.send(frame, { binary: true });
    await echoed;
    if (i >= 200) times.push(performance.now() - start);
  }
  env.removeAllListeners('message');
  return times;
}

// Memory per idle paired stream ---------------------------------------------------------------------------

async function idleMemory(): Promise<{ perStreamKiB: number; baselineMiB: number; loadedMiB: number }> {
  const relay = await startRelayProcess();
  const sockets: WebSocket[] = [];
  try {
    const envs: WebSocket[] = [];
    for (let e = 0; e < IDLE_ENVIRONMENTS; e++) {
      const env = await dial(url(relay.url, 'environment', `idle-${e}`));
      // Each environment answers every claim with a handshake frame, pairing the stream fully.
      env.on('message', (data: Buffer) => {
        const streamId = decodeFrame(data).streamId;
        env.send(encodeFrame(handshakeFrame(streamId, Buffer.from('m2'))));
      });
      envs.push(env);
    }
    sockets.push(...envs);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const baseline = relay.rssKiB();
    const BATCH = 250;
    for (let i = 0; i < IDLE_STREAMS; i += BATCH) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(BATCH, IDLE_STREAMS - i) }, async (_, j) => {
          const ws = await dial(url(relay.url, 'harness', `idle-${(i + j) % IDLE_ENVIRONMENTS}`));
          const answered = once(ws, 'message');
          ws.send(encodeFrame(resumeFrame(randomUUID(), 0)));
          await answered;
          return ws;
        }),
      );
      sockets.push(...batch);
    }
    const metrics = await (await fetch(`${relay.url.replace('ws:', 'http:')}/metrics`)).text();
    const streams = Number(/^relay_streams (\d+)$/m.exec(metrics)?.[1]);
    if (streams !== IDLE_STREAMS) throw new Error(`relay reports ${streams} streams, expected ${IDLE_STREAMS}`);
    // Let allocation settle (idle sockets: only timers run), then take the smallest of a few samples.
    const samples: number[] = [];
    for (let i = 0; i < 5; i++) {
      await new Promise((resolve) => setTimeout(resolve, 1000));
      samples.push(relay.rssKiB());
    }
    const loaded = Math.min(...samples);
    return {
      perStreamKiB: (loaded - baseline) / IDLE_STREAMS,
      baselineMiB: baseline / 1024,
      loadedMiB: loaded / 1024,
    };
  } finally {
    for (const ws of sockets) ws.terminate();
    await relay.close();
  }
}

// Run ----------------------------------------------------------------------------------------------------

process.stderr.write(`relay bench: ${TOTAL_MIB} MiB per throughput run, ${ROUNDS} round trips, median of ${REPEATS}\n`);
const relay = await startRelayProcess();
const figures = {
  direct: { one: 0, fanout: 0, p50: 0, p99: 0 },
  relay: { one: 0, fanout: 0, p50: 0, p99: 0 },
};
try {
  // One uncounted run each way first: the endpoints' and the relay's code paths are compiled before either
  // column is measured (the first run of a fresh process was up to twice as slow).
  const warmDirect = await direct(1);
  await throughput(warmDirect);
  await warmDirect.close();
  const warmRelay = await viaRelay(relay.url, 1);
  await throughput(warmRelay);
  await warmRelay.close();
  for (const [name, streams] of [
    ['one', 1],
    ['fanout', FANOUT],
  ] as const) {
    const directRuns: number[] = [];
    const relayRuns: number[] = [];
    const relayCpuPerGB: number[] = [];
    for (let r = 0; r < REPEATS; r++) {
      // Alternate so that machine noise hits both columns alike.
      const d = await direct(streams);
      directRuns.push(await throughput(d));
      await d.close();
      const v = await viaRelay(relay.url, streams);
      const cpuBefore = relay.cpuSeconds();
      relayRuns.push(await throughput(v));
      relayCpuPerGB.push(((relay.cpuSeconds() - cpuBefore) / (TOTAL_MIB * 1.048576)) * 1000);
      await v.close();
    }
    figures.direct[name] = median(directRuns);
    figures.relay[name] = median(relayRuns);
    process.stderr.write(
      `  ${streams} stream(s): direct ${directRuns.map((x) => x.toFixed(0))} relay ${relayRuns.map((x) => x.toFixed(0))} MB/s; relay CPU ${relayCpuPerGB.map((x) => x.toFixed(2))} s/GB\n`,
    );
  }
  const d = await direct(1);
  const directTimes = await roundTrips(d);
  await d.close();
  const v = await viaRelay(relay.url, 1);
  const relayTimes = await roundTrips(v);
  await v.close();
  figures.direct.p50 = percentile(directTimes, 50);
  figures.direct.p99 = percentile(directTimes, 99);
  figures.relay.p50 = percentile(relayTimes, 50);
  figures.relay.p99 = percentile(relayTimes, 99);
} finally {
  await relay.close();
}
process.stderr.write(`relay bench: ${IDLE_STREAMS} idle streams on ${IDLE_ENVIRONMENTS} environments…\n`);
const idle = await idleMemory();

// A round trip crosses the relay twice: the added latency per frame is half the difference.
const addedP50 = (figures.relay.p50 - figures.direct.p50) / 2;
const addedP99 = (figures.relay.p99 - figures.direct.p99) / 2;
const fmt = (n: number) => (Math.abs(n) >= 100 ? n.toFixed(0) : Math.abs(n) >= 10 ? n.toFixed(1) : n.toFixed(3));
const rows: Array<[string, string, string, string, string, string]> = [
  [
    '64 KiB Data frames, 1 stream (MB/s)',
    fmt(figures.direct.one),
    fmt(figures.relay.one),
    `${(figures.relay.one / figures.direct.one).toFixed(2)}×`,
    '≥ 0.7× direct',
    figures.relay.one >= 0.7 * figures.direct.one ? 'yes' : 'NO',
  ],
  [
    `64 KiB Data frames, ${FANOUT} streams aggregate (MB/s)`,
    fmt(figures.direct.fanout),
    fmt(figures.relay.fanout),
    `${(figures.relay.fanout / figures.direct.fanout).toFixed(2)}×`,
    '≥ 0.7× direct',
    figures.relay.fanout >= 0.7 * figures.direct.fanout ? 'yes' : 'NO',
  ],
  ['small frame round trip p50 (ms)', fmt(figures.direct.p50), fmt(figures.relay.p50), '', '', ''],
  ['small frame round trip p99 (ms)', fmt(figures.direct.p99), fmt(figures.relay.p99), '', '', ''],
  [
    'added per frame p50 (ms, half the RTT difference)',
    '',
    fmt(addedP50),
    '',
    '≤ 0.2 ms',
    addedP50 <= 0.2 ? 'yes' : 'NO',
  ],
  ['added per frame p99 (ms)', '', fmt(addedP99), '', '', ''],
  [
    `relay RSS per idle paired stream, ${IDLE_STREAMS} on ${IDLE_ENVIRONMENTS} envs (KiB)`,
    '',
    fmt(idle.perStreamKiB),
    '',
    '≤ 20 KiB',
    idle.perStreamKiB <= 20 ? 'yes' : 'NO',
  ],
  [
    `relay RSS before → with the idle streams (MiB)`,
    '',
    `${fmt(idle.baselineMiB)} → ${fmt(idle.loadedMiB)}`,
    '',
    '',
    '',
  ],
];
console.log(
  [
    '| metric | direct | relay | relay/direct | target | met |',
    '|---|---:|---:|---:|---|---|',
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n'),
);
const dir = join(repoRoot(), 'bench', 'results');
mkdirSync(dir, { recursive: true });
writeFileSync(
  join(dir, 'relay-latest.json'),
  `${JSON.stringify({ date: new Date().toISOString(), totalMiB: TOTAL_MIB, rounds: ROUNDS, figures, addedP50, addedP99, idle }, null, 2)}\n`,
);
process.exit(0);
