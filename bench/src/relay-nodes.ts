/**
 * `pnpm bench` (relay nodes; alone: `pnpm --filter @tether/bench bench:relay-nodes`): three `relay serve`
 * processes (the built bin, each trusting the bench's signing key through `--registry-key-file`), measured as a
 * deployment of three nodes would be loaded.
 *
 * 1. Memory per idle paired stream, per node: each node gets 100 environment sockets, then K harness streams
 *    claimed on them and answered (so fully paired); RSS (VmRSS) before and with them, medians of a few samples,
 *    and each node's `relay_streams` must equal K. No GC is forced (the relay exposes none).
 * 2. Forwarding capacity: Data frames the size of a stream's largest record (relay-kit's FRAME_BYTES), environment
 *    → harnesses with a 3 MiB window, S streams per node.
 *    Each node's load runs in its own forked process (relay-load.ts), so the loads are concurrent. First node 1
 *    alone, then all three at once: MB/s per node, the sum (bytes of all three over the wall time of the
 *    slowest), and each relay's CPU per GB. Every byte sent must arrive, or the run fails.
 *
 * Prints two tables and writes bench/results/relay-nodes-latest.json.
 *
 *   BENCH_RELAY_NODES_IDLE_STREAMS=5000 BENCH_RELAY_NODES_STREAMS=1,8 BENCH_RELAY_NODES_MIB=512 \
 *   BENCH_RELAY_NODES_REPEATS=5 pnpm --filter @tether/bench bench:relay-nodes
 */

import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import type { WebSocket } from 'ws';
import { machine, writeResults } from './commands.js';
import { benchSigningKey, openEnvironments, openIdleStreams, relayStreams, sleep, startRelay } from './relay-kit.js';
import type { LoadAnswer, LoadRequest } from './relay-load.js';
import { median, onCleanup, runBench, type ServiceProcess } from './services.js';

const NODES = 3;
const IDLE_STREAMS = Number(process.env.BENCH_RELAY_NODES_IDLE_STREAMS ?? 5_000);
const IDLE_ENVIRONMENTS = 100;
const STREAMS = (process.env.BENCH_RELAY_NODES_STREAMS ?? '1,8').split(',').map(Number);
const MIB = Number(process.env.BENCH_RELAY_NODES_MIB ?? 512);
const REPEATS = Number(process.env.BENCH_RELAY_NODES_REPEATS ?? 5);
const WARMUP_MIB = 32;

const key = benchSigningKey();
const fmt = (n: number) => (Math.abs(n) >= 100 ? n.toFixed(0) : Math.abs(n) >= 10 ? n.toFixed(1) : n.toFixed(2));

/** The sample median of `count` RSS readings of each relay, `everyMs` apart. */
async function rssMedians(relays: ServiceProcess[], count: number, everyMs: number): Promise<number[]> {
  const samples: number[][] = relays.map(() => []);
  for (let i = 0; i < count; i++) {
    await sleep(everyMs);
    for (const [n, relay] of relays.entries()) samples[n]?.push(relay.rssKiB());
  }
  return samples.map(median);
}

// 1. Idle streams ----------------------------------------------------------------------------------------

interface IdleNode {
  baselineMiB: number;
  loadedMiB: number;
  perStreamKiB: number;
}

async function idleMemory(relays: ServiceProcess[]): Promise<IdleNode[]> {
  const sockets: WebSocket[] = [];
  try {
    const options = relays.map((_, n) => ({
      environments: IDLE_ENVIRONMENTS,
      streams: IDLE_STREAMS,
      label: `idle-n${n}`,
    }));
    for (const [n, relay] of relays.entries()) {
      sockets.push(...(await openEnvironments(key, relay.url, options[n] as (typeof options)[number])));
    }
    const baseline = await rssMedians(relays, 3, 500);
    for (const [n, relay] of relays.entries()) {
      process.stderr.write(`  node ${n + 1}: ${IDLE_STREAMS} idle streams…\n`);
      sockets.push(...(await openIdleStreams(key, relay.url, options[n] as (typeof options)[number])));
    }
    for (const [n, relay] of relays.entries()) {
      const streams = await relayStreams(relay.url);
      if (streams !== IDLE_STREAMS) {
        throw new Error(`node ${n + 1} reports ${streams} streams, expected ${IDLE_STREAMS}`);
      }
    }
    // Idle sockets: only timers run. Let allocation settle, then take the median of five samples per node.
    const loaded = await rssMedians(relays, 5, 1_000);
    return relays.map((_, n) => ({
      baselineMiB: (baseline[n] as number) / 1024,
      loadedMiB: (loaded[n] as number) / 1024,
      perStreamKiB: ((loaded[n] as number) - (baseline[n] as number)) / IDLE_STREAMS,
    }));
  } finally {
    for (const ws of sockets) ws.terminate();
  }
}

// 2. Forwarding ------------------------------------------------------------------------------------------

/** A forked relay-load.ts, one request at a time. */
class LoadClient {
  readonly #child: ChildProcess;
  readonly #close: () => Promise<void>;
  #pending: { resolve(answer: LoadAnswer): void; reject(err: Error): void } | null = null;

  private constructor(child: ChildProcess) {
    this.#child = child;
    const exited = once(child, 'exit');
    this.#close = onCleanup(async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      await exited;
    });
    child.on('message', (answer: LoadAnswer) => {
      const pending = this.#pending;
      this.#pending = null;
      if (!pending) return;
      if (answer.type === 'error') pending.reject(new Error(`load client: ${answer.message}`));
      else pending.resolve(answer);
    });
    child.once('exit', (code, signal) => {
      this.#pending?.reject(new Error(`load client exited (${signal ?? code})`));
      this.#pending = null;
    });
  }

  static async start(relayUrl: string): Promise<LoadClient> {
    // fork() runs it with this process's execArgv (tsx, the tether-source condition).
    const client = new LoadClient(fork(fileURLToPath(new URL('./relay-load.ts', import.meta.url)), [], {}));
    await client.request({
      type: 'init',
      relayUrl,
      keyPem: key.privateKey.export({ type: 'pkcs8', format: 'pem' }) as string,
    });
    return client;
  }

  request(request: LoadRequest): Promise<LoadAnswer> {
    if (this.#pending) throw new Error('one request at a time');
    return new Promise((resolve, reject) => {
      this.#pending = { resolve, reject };
      this.#child.send(request);
    });
  }

  close(): Promise<void> {
    return this.#close();
  }
}

interface Round {
  /** MB/s per loaded node. */
  perNode: number[];
  /** MB/s of all loaded nodes together (their bytes over the wall time of the slowest). */
  sum: number;
  /** Relay CPU seconds per GB forwarded, per loaded node. */
  cpuPerGB: number[];
}

/** One concurrent transfer of `mib` through each of `clients` (client n loads relay n), `streams` streams each. */
async function round(clients: LoadClient[], relays: ServiceProcess[], streams: number, mib: number): Promise<Round> {
  await Promise.all(clients.map((c) => c.request({ type: 'pair', streams })));
  const cpuBefore = relays.map((r) => r.cpuSeconds());
  const start = performance.now();
  const done = await Promise.all(
    clients.map(async (c) => {
      const answer = await c.request({ type: 'go', mib });
      if (answer.type !== 'done') throw new Error(`expected done, got ${answer.type}`);
      return answer;
    }),
  );
  const wall = (performance.now() - start) / 1000;
  const cpu = relays.map((r, n) => r.cpuSeconds() - (cpuBefore[n] as number));
  await Promise.all(clients.map((c) => c.request({ type: 'unpair' })));
  const bytes = done.reduce((sum, d) => sum + d.bytes, 0);
  return {
    perNode: done.map((d) => d.bytes / 1e6 / d.seconds),
    sum: bytes / 1e6 / wall,
    cpuPerGB: done.map((d, n) => (cpu[n] as number) / (d.bytes / 1e9)),
  };
}

interface ForwardRow {
  streams: number;
  aloneMBps: number;
  perNodeMBps: number[];
  sumMBps: number;
  cpuPerGB: number;
}

async function forwarding(relays: ServiceProcess[]): Promise<ForwardRow[]> {
  const clients: LoadClient[] = [];
  try {
    for (const relay of relays) clients.push(await LoadClient.start(relay.url));
    // One uncounted transfer per node first, so no node's first measured run pays for compiling its code paths.
    await round(clients, relays, 1, WARMUP_MIB);
    const rows: ForwardRow[] = [];
    for (const streams of STREAMS) {
      const alone: number[] = [];
      const together: Round[] = [];
      for (let r = 0; r < REPEATS; r++) {
        // Alternate so that machine noise hits both alike.
        alone.push((await round(clients.slice(0, 1), relays.slice(0, 1), streams, MIB)).perNode[0] as number);
        const all = await round(clients, relays, streams, MIB);
        together.push(all);
        process.stderr.write(
          `  ${streams} stream(s) per node: node 1 alone ${fmt(alone.at(-1) as number)} MB/s; three at once ${all.perNode.map(fmt).join(' + ')} = ${fmt(all.sum)} MB/s; relay CPU ${all.cpuPerGB.map(fmt).join(', ')} s/GB\n`,
        );
      }
      rows.push({
        streams,
        aloneMBps: median(alone),
        perNodeMBps: relays.map((_, n) => median(together.map((t) => t.perNode[n] as number))),
        sumMBps: median(together.map((t) => t.sum)),
        cpuPerGB: median(together.flatMap((t) => t.cpuPerGB)),
      });
    }
    return rows;
  } finally {
    for (const c of clients) {
      await c.request({ type: 'exit' }).catch(() => {});
      await c.close();
    }
  }
}

// Run ----------------------------------------------------------------------------------------------------

await runBench(async () => {
  const loadAtStart = loadavg();
  process.stderr.write(
    `relay nodes bench: ${NODES} nodes, ${IDLE_STREAMS} idle streams per node, ${MIB} MiB per node per transfer, ` +
      `${STREAMS.join('/')} streams per node, median of ${REPEATS}; load average ${loadAtStart
        .map((x) => x.toFixed(1))
        .join(' ')}\n`,
  );
  const relays: ServiceProcess[] = [];
  for (let n = 0; n < NODES; n++) {
    relays.push(await startRelay(key, { maxConnectionsPerIp: IDLE_STREAMS + IDLE_ENVIRONMENTS + 100 }));
  }
  const idle = await idleMemory(relays);
  const forward = await forwarding(relays);
  for (const relay of relays) await relay.close();

  console.log(
    [
      `| relay node | RSS before (MiB) | with ${IDLE_STREAMS} idle paired streams (MiB) | per stream (KiB) |`,
      '|---|---:|---:|---:|',
      ...idle.map(
        (node, n) =>
          `| node ${n + 1} | ${fmt(node.baselineMiB)} | ${fmt(node.loadedMiB)} | ${fmt(node.perStreamKiB)} |`,
      ),
      `| median | | | ${fmt(median(idle.map((node) => node.perStreamKiB)))} |`,
      '',
      '| streams per node | node 1 alone (MB/s) | node 1 | node 2 | node 3 | three nodes, sum (MB/s) | sum / alone | relay CPU (s/GB) |',
      '|---:|---:|---:|---:|---:|---:|---:|---:|',
      ...forward.map(
        (row) =>
          `| ${row.streams} | ${fmt(row.aloneMBps)} | ${row.perNodeMBps.map(fmt).join(' | ')} | ${fmt(row.sumMBps)} | ${(row.sumMBps / row.aloneMBps).toFixed(2)}× | ${fmt(row.cpuPerGB)} |`,
      ),
    ].join('\n'),
  );
  writeResults('relay-nodes-latest.json', {
    ...machine(loadAtStart),
    idleStreams: IDLE_STREAMS,
    mibPerNode: MIB,
    idle,
    forward,
  });
});
