/**
 * `pnpm bench` (relay section; alone: `pnpm --filter @tether/bench bench:relay`): the relay (its built bin, in
 * its own process) side by side with a direct WebSocket between the same two endpoints, same run: one stream,
 * 32 streams, 100 streams all active at once (aggregate and how evenly they share the node), round trips, and
 * what idle paired streams cost the node. Prints a table and writes bench/results/relay-latest.json.
 *
 *   BENCH_RELAY_MIB=256 BENCH_RELAY_FRAME_BYTES=61456 BENCH_RELAY_ROUNDS=2000 BENCH_RELAY_IDLE_STREAMS=10000 BENCH_RELAY_REPEATS=5 \
 *   BENCH_RELAY_THROUGHPUT_REPEATS=15 \
 *   BENCH_RELAY_ACTIVE_STREAMS=100 BENCH_RELAY_ACTIVE_ENVIRONMENTS=100 BENCH_RELAY_ACTIVE_SECONDS=5 pnpm bench
 */

import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { dataFrame, decodeFrame, encodeFrame } from '@tether/relay-frames';
import { type WebSocket, WebSocketServer } from 'ws';
import { machine, writeResults } from './commands.js';
import {
  type ActiveRun,
  activeTransfer,
  benchSigningKey,
  dial,
  FRAME_BYTES,
  openEnvironments,
  openIdleStreams,
  type Pairing,
  relayStreams,
  sleep,
  startRelay,
  tick,
  throughput as transferRate,
  viaRelay,
} from './relay-kit.js';
import { median, percentile, runBench } from './services.js';

const TOTAL_MIB = Number(process.env.BENCH_RELAY_MIB ?? 256);
const ROUNDS = Number(process.env.BENCH_RELAY_ROUNDS ?? 2000);
const IDLE_STREAMS = Number(process.env.BENCH_RELAY_IDLE_STREAMS ?? 10_000);
const IDLE_ENVIRONMENTS = 100;
const FANOUT = 32;
const REPEATS = Number(process.env.BENCH_RELAY_REPEATS ?? 5);
/**
 * Pairs of runs (direct, then relayed) behind the one- and 32-stream rows. A 256 MiB run takes a third of a second
 * and single runs on two cores spread by ±20 %: over 30 pairs (2026-12-08) the one-stream ratio of medians was
 * 0.84×, while a median of 5 pairs fell under 0.8× in a fifth of the resamples of those same pairs, and a median
 * of 15 in one in fifty. 15 pairs cost about 20 s.
 */
const THROUGHPUT_REPEATS = Number(process.env.BENCH_RELAY_THROUGHPUT_REPEATS ?? 15);
const WARM_RUNS = 3;
const ACTIVE_STREAMS = Number(process.env.BENCH_RELAY_ACTIVE_STREAMS ?? 100);
/** Each active stream on an environment socket of its own by default: independent sessions, as a node carries. */
const ACTIVE_ENVIRONMENTS = Number(process.env.BENCH_RELAY_ACTIVE_ENVIRONMENTS ?? ACTIVE_STREAMS);
const ACTIVE_SECONDS = Number(process.env.BENCH_RELAY_ACTIVE_SECONDS ?? 5);
/** The first second of an active run is not measured: every stream has reached its pace by then. */
const ACTIVE_SETTLE_SECONDS = 1;
/** In flight per active stream (about 8 frames): the streams' windows add up to 50 MiB at 100 streams. */
const ACTIVE_WINDOW_BYTES = 512 * 1024;

const key = benchSigningKey();
const startRelayProcess = () =>
  startRelay(key, {
    maxConnectionsPerIp: IDLE_STREAMS + IDLE_ENVIRONMENTS + 100,
    nodeArgs: (process.env.BENCH_RELAY_NODE_ARGS ?? '').split(' ').filter(Boolean),
  });
const throughput = (p: Pairing) => transferRate(p, TOTAL_MIB);

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

// Many active streams at once ------------------------------------------------------------------------------

/** One active run in brief: the aggregate and the spread of the per-stream rates (MB/s). */
interface ActiveSummary {
  aggregate: number;
  min: number;
  median: number;
  max: number;
  /** Slowest ÷ fastest stream. */
  spread: number;
}

function summarize(run: ActiveRun): ActiveSummary {
  const sorted = [...run.rates].sort((a, b) => a - b);
  const min = sorted[0] as number;
  const max = sorted[sorted.length - 1] as number;
  return { aggregate: run.aggregate, min, median: median(sorted), max, spread: max > 0 ? min / max : 0 };
}

/** The median of each figure over the runs. */
function medianSummary(runs: ActiveSummary[]): ActiveSummary {
  const of = (field: keyof ActiveSummary) => median(runs.map((run) => run[field]));
  return { aggregate: of('aggregate'), min: of('min'), median: of('median'), max: of('max'), spread: of('spread') };
}

const activeOptions = {
  seconds: ACTIVE_SECONDS,
  settleSeconds: ACTIVE_SETTLE_SECONDS,
  windowBytes: ACTIVE_WINDOW_BYTES,
};

// Memory per idle paired stream ---------------------------------------------------------------------------

async function idleMemory(): Promise<{ perStreamKiB: number; baselineMiB: number; loadedMiB: number }> {
  const relay = await startRelayProcess();
  const sockets: WebSocket[] = [];
  try {
    const options = { environments: IDLE_ENVIRONMENTS, streams: IDLE_STREAMS, label: 'idle' };
    sockets.push(...(await openEnvironments(key, relay.url, options)));
    await sleep(1000);
    const baseline = relay.rssKiB();
    sockets.push(...(await openIdleStreams(key, relay.url, options)));
    const streams = await relayStreams(relay.url);
    if (streams !== IDLE_STREAMS) throw new Error(`relay reports ${streams} streams, expected ${IDLE_STREAMS}`);
    // Let allocation settle (idle sockets: only timers run), then take the smallest of a few samples.
    const samples: number[] = [];
    for (let i = 0; i < 5; i++) {
      await sleep(1000);
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

await runBench(async () => {
  const loadAtStart = loadavg();
  process.stderr.write(
    `relay bench: ${TOTAL_MIB} MiB per throughput run, median of ${THROUGHPUT_REPEATS}; ${ROUNDS} round trips; active runs median of ${REPEATS}\n`,
  );
  const relay = await startRelayProcess();
  const figures = {
    direct: { one: 0, fanout: 0, p50: 0, p99: 0 },
    relay: { one: 0, fanout: 0, p50: 0, p99: 0 },
    /** The relay's CPU-seconds per GB forwarded (median of the runs). */
    relayCpuPerGB: { one: 0, fanout: 0, active: 0 },
  };
  const active = { direct: [] as ActiveSummary[], relay: [] as ActiveSummary[], relayRssMiB: [] as number[] };
  const cpuPerGB = (seconds: number, bytes: number) => seconds / (bytes / 1e9);
  try {
    // Uncounted runs each way first: the endpoints' and the relay's code paths are optimized before either column
    // is measured. The first run of a fresh process was up to twice as slow, and after one warm run the relay's
    // next two still spent 0.67 CPU-s per GB against 0.4–0.5 later (2026-12-08).
    for (let w = 0; w < WARM_RUNS; w++) {
      const warmDirect = await direct(1);
      await throughput(warmDirect);
      await warmDirect.close();
      const warmRelay = await viaRelay(key, relay.url, 1);
      await throughput(warmRelay);
      await warmRelay.close();
    }
    for (const [name, streams] of [
      ['one', 1],
      ['fanout', FANOUT],
    ] as const) {
      const directRuns: number[] = [];
      const relayRuns: number[] = [];
      const relayCpuPerGB: number[] = [];
      for (let r = 0; r < THROUGHPUT_REPEATS; r++) {
        // Alternate so that machine noise hits both columns alike.
        const d = await direct(streams);
        directRuns.push(await throughput(d));
        await d.close();
        const v = await viaRelay(key, relay.url, streams);
        const cpuBefore = relay.cpuSeconds();
        relayRuns.push(await throughput(v));
        relayCpuPerGB.push(cpuPerGB(relay.cpuSeconds() - cpuBefore, TOTAL_MIB * 1024 * 1024));
        await v.close();
      }
      figures.direct[name] = median(directRuns);
      figures.relay[name] = median(relayRuns);
      figures.relayCpuPerGB[name] = median(relayCpuPerGB);
      process.stderr.write(
        `  ${streams} stream(s): direct ${directRuns.map((x) => x.toFixed(0))} relay ${relayRuns.map((x) => x.toFixed(0))} MB/s; relay CPU ${relayCpuPerGB.map((x) => x.toFixed(2))} s/GB\n`,
      );
    }
    const activeCpu: number[] = [];
    for (let r = 0; r < REPEATS; r++) {
      const d = await direct(ACTIVE_STREAMS);
      active.direct.push(summarize(await activeTransfer(d, activeOptions)));
      await d.close();
      const v = await viaRelay(key, relay.url, ACTIVE_STREAMS, ACTIVE_ENVIRONMENTS);
      const cpuBefore = relay.cpuSeconds();
      const run = await activeTransfer(v, {
        ...activeOptions,
        atEnd: () => active.relayRssMiB.push(relay.rssKiB() / 1024),
      });
      activeCpu.push(cpuPerGB(relay.cpuSeconds() - cpuBefore, run.bytes));
      active.relay.push(summarize(run));
      await v.close();
    }
    figures.relayCpuPerGB.active = median(activeCpu);
    const brief = (runs: ActiveSummary[]) =>
      runs.map((x) => `${x.aggregate.toFixed(0)} (${x.min.toFixed(1)}–${x.max.toFixed(1)})`).join(', ');
    process.stderr.write(
      `  ${ACTIVE_STREAMS} active streams, aggregate (slowest–fastest stream) MB/s: direct ${brief(active.direct)}; relay ${brief(active.relay)}; relay CPU ${activeCpu.map((x) => x.toFixed(2))} s/GB\n`,
    );
    const d = await direct(1);
    const directTimes = await roundTrips(d);
    await d.close();
    const v = await viaRelay(key, relay.url, 1);
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
  const activeDirect = medianSummary(active.direct);
  const activeRelay = medianSummary(active.relay);
  const fmt = (n: number) => (Math.abs(n) >= 100 ? n.toFixed(0) : Math.abs(n) >= 10 ? n.toFixed(1) : n.toFixed(3));
  const cpu = (n: number) => n.toFixed(2);
  const spread = (x: ActiveSummary) => `${fmt(x.min)} / ${fmt(x.median)} / ${fmt(x.max)}`;
  const vsDirect = (relayed: number, directly: number, cpuPerGB: number) =>
    [
      fmt(directly),
      fmt(relayed),
      `${(relayed / directly).toFixed(2)}×`,
      cpu(cpuPerGB),
      '≥ 0.8× direct',
      relayed >= 0.8 * directly ? 'yes' : 'NO',
    ] as const;
  const streamsOn =
    ACTIVE_ENVIRONMENTS === ACTIVE_STREAMS
      ? 'each on its own environment'
      : `on ${ACTIVE_ENVIRONMENTS} environment${ACTIVE_ENVIRONMENTS === 1 ? '' : 's'}`;
  const rows: Array<readonly [string, string, string, string, string, string, string]> = [
    [
      '60 KiB records (a stream\u2019s largest Data frames), 1 stream (MB/s)',
      ...vsDirect(figures.relay.one, figures.direct.one, figures.relayCpuPerGB.one),
    ],
    [
      `60 KiB records, ${FANOUT} streams aggregate (MB/s)`,
      ...vsDirect(figures.relay.fanout, figures.direct.fanout, figures.relayCpuPerGB.fanout),
    ],
    [
      `${ACTIVE_STREAMS} active streams at once (${streamsOn}), aggregate (MB/s)`,
      ...vsDirect(activeRelay.aggregate, activeDirect.aggregate, figures.relayCpuPerGB.active),
    ],
    [
      `${ACTIVE_STREAMS} active streams: slowest ÷ fastest stream`,
      activeDirect.spread.toFixed(2),
      activeRelay.spread.toFixed(2),
      '',
      '',
      '≥ 0.5',
      activeRelay.spread >= 0.5 ? 'yes' : 'NO',
    ],
    [
      `${ACTIVE_STREAMS} active streams: per-stream min / median / max (MB/s)`,
      spread(activeDirect),
      spread(activeRelay),
      '',
      '',
      '',
      '',
    ],
    [
      `relay RSS while forwarding the ${ACTIVE_STREAMS} active streams (MiB)`,
      '',
      fmt(median(active.relayRssMiB)),
      '',
      '',
      '',
      '',
    ],
    ['small frame round trip p50 (ms)', fmt(figures.direct.p50), fmt(figures.relay.p50), '', '', '', ''],
    ['small frame round trip p99 (ms)', fmt(figures.direct.p99), fmt(figures.relay.p99), '', '', '', ''],
    [
      'added per frame p50 (ms, half the RTT difference)',
      '',
      fmt(addedP50),
      '',
      '',
      '≤ 0.2 ms',
      addedP50 <= 0.2 ? 'yes' : 'NO',
    ],
    ['added per frame p99 (ms)', '', fmt(addedP99), '', '', '', ''],
    [
      `relay RSS per idle paired stream, ${IDLE_STREAMS} on ${IDLE_ENVIRONMENTS} envs (KiB)`,
      '',
      fmt(idle.perStreamKiB),
      '',
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
      '',
    ],
  ];
  console.log(
    [
      '| metric | direct | relay | relay/direct | relay CPU (s/GB) | target | met |',
      '|---|---:|---:|---:|---:|---|---|',
      ...rows.map((r) => `| ${r.join(' | ')} |`),
    ].join('\n'),
  );
  writeResults('relay-latest.json', {
    ...machine(loadAtStart),
    totalMiB: TOTAL_MIB,
    rounds: ROUNDS,
    figures,
    active: {
      streams: ACTIVE_STREAMS,
      environments: ACTIVE_ENVIRONMENTS,
      seconds: ACTIVE_SECONDS,
      windowBytes: ACTIVE_WINDOW_BYTES,
      direct: { median: activeDirect, runs: active.direct },
      relay: { median: activeRelay, runs: active.relay, rssMiB: active.relayRssMiB },
    },
    addedP50,
    addedP99,
    idle,
  });
});
