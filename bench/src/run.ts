/**
 * `pnpm bench`: the executor side by side with the real `codex exec-server`, same machine, same run,
 * same client (ours, over WebSocket, reading notifications). Prints a table with both columns, the
 * ratio and the target of each figure, and writes bench/results/latest.json.
 *
 *   BENCH_STREAM_MIB=256 BENCH_FS_MIB=256 BENCH_ITERATIONS=100 pnpm bench
 */

import { randomFillSync } from 'node:crypto';
import { once } from 'node:events';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { BufferPool } from '@tether/bytes';
import { parseMessage } from '@tether/jsonrpc';
import { type PeerKind, startPeer } from '@tether/test-kit';
import { installFastMessages, joinParts } from '@tether/user-read/websocket';
import { WebSocket } from 'ws';
import { writeResults } from './commands.js';

const INBOUND = new BufferPool({ step: 64 * 1024 });

const STREAM_MIB = Number(process.env.BENCH_STREAM_MIB ?? 256);
/** Streamed once, unmeasured, by each fresh peer before its measured stream (0: none). */
const STREAM_WARMUP_MIB = Number(process.env.BENCH_STREAM_WARMUP_MIB ?? 64);
const ITERATIONS = Number(process.env.BENCH_ITERATIONS ?? 100);
const FS_MIB = Number(process.env.BENCH_FS_MIB ?? 256);
const FS_BLOCK = 1024 * 1024;
const FS_IN_FLIGHT = 4;
/** BENCH_ONLY=fs or =stream measures just those rows (the others print NaN): quicker when iterating on them. */
const ONLY_FS = process.env.BENCH_ONLY === 'fs';
const ONLY_STREAM = process.env.BENCH_ONLY === 'stream';
const IDLE_SESSIONS = 100;
const FINISHED_PROCESSES = 1000;
const PEER_ARGS = ['--concurrent-requests', '4'];
const CHILD_ENV = { PATH: '/usr/local/bin:/usr/bin:/bin' };
const CWD = `file://${process.cwd()}`;

interface Notification {
  method: string;
  params: { processId: string; seq: number; stream?: string; chunk?: string; exitCode?: number };
}

/** Opens a WebSocket; a freshly started codex sometimes resets the first connections, so retry a little. */
async function dial(url: string): Promise<WebSocket> {
  for (let attempt = 1; ; attempt++) {
    const ws = new WebSocket(url, { perMessageDeflate: false });
    try {
      await once(ws, 'open');
      return ws;
    } catch (err) {
      if (attempt >= 5) throw err;
      await new Promise((resolve) => setTimeout(resolve, 50 * attempt));
    }
  }
}

/**
 * One initialized connection with a notification hook per process id. Deliberately lean (raw `ws`,
 * one parse per message, no extra layers) so the peers' costs, not the client's, decide the figures.
 */
class BenchClient {
  private readonly waiters = new Map<string, (n: Notification) => void>();
  private readonly pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  private nextId = 1;
  private constructor(private readonly ws: WebSocket) {
    // Read as the executor and the SDK's relay links read (one shared read buffer, each message assembled
    // in a pooled slab) and parsed as the SDK parses (parseMessage: a large message's long string straight
    // from the bytes, the rest by JSON.parse): the same code for both peers, so their costs decide.
    const onMessage = (data: Buffer) => {
      const message = parseMessage(data);
      if (message.kind === 'response' || message.kind === 'error') {
        const call = this.pending.get(message.id as number);
        this.pending.delete(message.id as number);
        if (message.kind === 'error') call?.reject(new Error(`${message.error.code} ${message.error.message}`));
        else call?.resolve(message.result);
      } else if (message.kind === 'notification') {
        const notification = message as Notification;
        this.waiters.get(notification.params?.processId ?? '')?.(notification);
      }
    };
    ws.on('message', onMessage);
    installFastMessages(ws, {
      server: false,
      maxPayload: 256 * 1024 * 1024,
      text: true,
      lease: (size) => INBOUND.lease(size),
      onMessage: (parts, length) => {
        onMessage(joinParts(parts, length));
        return false; // parsed into copies: the slab goes back
      },
    });
    ws.on('close', () => {
      for (const call of this.pending.values()) call.reject(new Error('connection closed'));
    });
  }

  static async connect(url: string): Promise<BenchClient> {
    const client = new BenchClient(await dial(url));
    await client.call('initialize', { clientName: 'tether-bench' });
    client.ws.send(JSON.stringify({ method: 'initialized', params: {} }));
    return client;
  }

  call<T = unknown>(method: string, params: unknown): Promise<T> {
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.ws.send(JSON.stringify({ id, method, params }));
    });
  }

  /** Calls `onNotification` for every notification of `processId` until it returns true. */
  until(processId: string, onNotification: (n: Notification) => boolean): Promise<void> {
    return new Promise((resolve) => {
      this.waiters.set(processId, (n) => {
        if (onNotification(n)) {
          this.waiters.delete(processId);
          resolve();
        }
      });
    });
  }

  start(processId: string, argv: string[], extra: Record<string, unknown> = {}): Promise<unknown> {
    return this.call('process/start', { processId, argv, cwd: CWD, env: CHILD_ENV, tty: false, ...extra });
  }

  close(): void {
    this.ws.terminate();
  }
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

function base64Bytes(text: string): number {
  const padding = text.endsWith('==') ? 2 : text.endsWith('=') ? 1 : 0;
  return (text.length / 4) * 3 - padding;
}

async function streamThroughput(url: string, mib = STREAM_MIB): Promise<number> {
  const client = await BenchClient.connect(url);
  const bytes = mib * 1024 * 1024;
  let received = 0;
  const t0 = performance.now();
  const done = client.until('stream', (n) => {
    if (n.method === 'process/output' && n.params.chunk) received += base64Bytes(n.params.chunk);
    return n.method === 'process/closed';
  });
  await client.start('stream', ['head', '-c', String(bytes), '/dev/zero']);
  await done;
  const seconds = (performance.now() - t0) / 1000;
  client.close();
  if (received !== bytes) throw new Error(`stream delivered ${received} of ${bytes} bytes by notification`);
  return bytes / 1e6 / seconds;
}

async function trueLatency(url: string): Promise<number> {
  const client = await BenchClient.connect(url);
  const samples: number[] = [];
  for (let i = 0; i < ITERATIONS + 5; i++) {
    const id = `true-${i}`;
    const t0 = performance.now();
    const closed = client.until(id, (n) => n.method === 'process/closed');
    await client.start(id, ['true']);
    await closed;
    if (i >= 5) samples.push(performance.now() - t0); // the first few warm up both peers
  }
  client.close();
  return percentile(samples, 50);
}

async function ptyEcho(url: string): Promise<number> {
  const client = await BenchClient.connect(url);
  let ready!: () => void;
  let sawOutput: ((text: string) => void) | null = null;
  const started = new Promise<void>((resolve) => {
    ready = resolve;
  });
  void client.until('pty', (n) => {
    if (n.method === 'process/output' && n.params.chunk) {
      const text = Buffer.from(n.params.chunk, 'base64').toString();
      if (text.includes('ready')) ready();
      sawOutput?.(text);
    }
    return n.method === 'process/closed';
  });
  // `stty raw -echo`: cat echoes each byte itself, unbuffered, so one byte = one round trip.
  await client.start('pty', ['/bin/sh', '-c', 'stty raw -echo; echo ready; exec cat'], { tty: true });
  await started;
  const samples: number[] = [];
  for (let i = 0; i < ITERATIONS + 5; i++) {
    const t0 = performance.now();
    const echoed = new Promise<void>((resolve) => {
      sawOutput = (text) => {
        if (text.includes('x')) resolve();
      };
    });
    await client.call('process/write', { processId: 'pty', chunk: 'eA==', writeId: `w${i}` });
    await echoed;
    if (i >= 5) samples.push(performance.now() - t0);
  }
  await client.call('process/terminate', { processId: 'pty' });
  client.close();
  return percentile(samples, 50);
}

/** A file of `FS_MIB` random MiB for the block benchmarks, written once per run. */
const fsDir = mkdtempSync(join(tmpdir(), 'tether-bench-fs-'));
const fsSource = join(fsDir, 'source.bin');
{
  const fd = openSync(fsSource, 'w');
  const block = Buffer.alloc(FS_BLOCK);
  for (let i = 0; i < FS_MIB; i++) writeSync(fd, randomFillSync(block));
  closeSync(fd);
}

/** Runs `issue(i)` for i in [0, count) with `FS_IN_FLIGHT` calls outstanding; returns MB/s. */
async function pipelined(count: number, issue: (i: number) => Promise<number>): Promise<number> {
  let next = 0;
  let bytes = 0;
  const t0 = performance.now();
  const lane = async () => {
    while (next < count) {
      const done = await issue(next++); // not `bytes += await …`: that reads `bytes` before awaiting
      bytes += done;
    }
  };
  await Promise.all(Array.from({ length: FS_IN_FLIGHT }, lane));
  return bytes / 1e6 / ((performance.now() - t0) / 1000);
}

/** `fs/open` + `fs/readBlock` of the whole file in 1 MiB blocks. */
async function fsReadThroughput(url: string): Promise<number> {
  const client = await BenchClient.connect(url);
  await client.call('fs/open', { handleId: 'src', path: `file://${fsSource}` });
  const rate = await pipelined(FS_MIB, async (i) => {
    const { chunk } = await client.call<{ chunk: string }>('fs/readBlock', {
      handleId: 'src',
      offset: i * FS_BLOCK,
      len: FS_BLOCK,
    });
    return base64Bytes(chunk);
  });
  client.close();
  return rate;
}

/** `fs/open {mode: replace}` + `fs/writeBlock` of as many bytes in 1 MiB blocks. */
async function fsWriteThroughput(url: string): Promise<number> {
  const client = await BenchClient.connect(url);
  const target = join(fsDir, 'target.bin');
  await client.call('fs/open', { handleId: 'dst', path: `file://${target}`, mode: 'replace' });
  const chunk = randomFillSync(Buffer.alloc(FS_BLOCK)).toString('base64');
  const rate = await pipelined(FS_MIB, async (i) => {
    await client.call('fs/writeBlock', { handleId: 'dst', offset: i * FS_BLOCK, chunk });
    return FS_BLOCK;
  });
  await client.call('fs/close', { handleId: 'dst' });
  client.close();
  rmSync(target, { force: true });
  return rate;
}

function peakRssMiB(pid: number): { rss: number; hwm: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string) => Number(new RegExp(`${name}:\\s+(\\d+) kB`).exec(status)?.[1] ?? Number.NaN) / 1024;
  return { rss: field('VmRSS'), hwm: field('VmHWM') };
}

async function idleFootprint(url: string, pid: number): Promise<number> {
  const clients: BenchClient[] = [];
  for (let i = 0; i < IDLE_SESSIONS; i++) clients.push(await BenchClient.connect(url));
  const worker = clients[0]!;
  for (let i = 0; i < FINISHED_PROCESSES; i += 20) {
    const batch = [];
    for (let j = i; j < i + 20; j++) {
      const id = `done-${j}`;
      batch.push(worker.until(id, (n) => n.method === 'process/closed'));
      batch.push(worker.start(id, ['true']));
    }
    await Promise.all(batch);
  }
  const { rss } = peakRssMiB(pid);
  for (const client of clients) client.close();
  return rss;
}

type Figures = {
  streamMBps: number;
  trueP50Ms: number;
  ptyEchoP50Ms: number;
  idleRssMiB: number;
  peakRssMiB: number;
  fsReadMBps: number;
  fsWriteMBps: number;
};

async function measure(kind: PeerKind): Promise<Figures> {
  const run = async <T>(task: (url: string, pid: number) => Promise<T>): Promise<T> => {
    await using peer = await startPeer({ kind, transport: 'ws', args: PEER_ARGS });
    try {
      return await task(peer.url!, peer.pid);
    } catch (err) {
      process.stderr.write(
        `${kind} failed (exit: ${JSON.stringify(peer.exitStatus())}); its stderr:\n${peer.stderr()}\n`,
      );
      throw err;
    }
  };
  if (ONLY_FS) {
    const [fsReadMBps, fsWriteMBps] = [await run(fsReadThroughput), await run(fsWriteThroughput)];
    const none = Number.NaN;
    return {
      streamMBps: none,
      trueP50Ms: none,
      ptyEchoP50Ms: none,
      idleRssMiB: none,
      peakRssMiB: none,
      fsReadMBps,
      fsWriteMBps,
    };
  }
  const streamMBps = streamMedians[kind];
  if (ONLY_STREAM) {
    const none = Number.NaN;
    return {
      streamMBps,
      trueP50Ms: none,
      ptyEchoP50Ms: none,
      idleRssMiB: none,
      peakRssMiB: none,
      fsReadMBps: none,
      fsWriteMBps: none,
    };
  }
  process.stderr.write(`${kind}: true latency…\n`);
  const trueP50Ms = await run(trueLatency);
  process.stderr.write(`${kind}: pty echo…\n`);
  const ptyEchoP50Ms = await run(ptyEcho);
  process.stderr.write(`${kind}: ${IDLE_SESSIONS} idle sessions + ${FINISHED_PROCESSES} finished processes…\n`);
  let peak = 0;
  const idleRssMiB = await run(async (url, pid) => {
    const rss = await idleFootprint(url, pid);
    peak = peakRssMiB(pid).hwm;
    return rss;
  });
  process.stderr.write(`${kind}: fs blocks, ${FS_MIB} MiB each way…\n`);
  const fsReadMBps = await run(fsReadThroughput);
  const fsWriteMBps = await run(fsWriteThroughput);
  return { streamMBps, trueP50Ms, ptyEchoP50Ms, idleRssMiB, peakRssMiB: peak, fsReadMBps, fsWriteMBps };
}

/**
 * Streaming is the figure most sensitive to whatever else the machine does, so it is measured in
 * alternating rounds (codex, tether, then tether, codex, …) and each side's median is reported. Each round
 * starts a fresh peer and lets it stream `STREAM_WARMUP_MIB` first, unmeasured: an executor serves many
 * streams in its life, and what is compared is its steady state, not the first seconds in which V8 is
 * still compiling the hot path (the first stream of a fresh tether executor ran ≈ 25 % slower than the
 * next ones; codex, native code, has no such phase, and gets the same warm-up).
 */
const STREAM_RUNS = Number(process.env.BENCH_STREAM_RUNS ?? 3);
const streamMedians: Record<PeerKind, number> = { codex: Number.NaN, tether: Number.NaN };
if (!ONLY_FS) {
  const samples: Record<PeerKind, number[]> = { codex: [], tether: [] };
  for (let round = 0; round < STREAM_RUNS; round++) {
    const order: PeerKind[] = round % 2 === 0 ? ['codex', 'tether'] : ['tether', 'codex'];
    for (const kind of order) {
      process.stderr.write(`${kind}: streaming ${STREAM_MIB} MiB (round ${round + 1} of ${STREAM_RUNS})…\n`);
      await using peer = await startPeer({ kind, transport: 'ws', args: PEER_ARGS });
      if (STREAM_WARMUP_MIB > 0) await streamThroughput(peer.url!, STREAM_WARMUP_MIB);
      samples[kind].push(await streamThroughput(peer.url!));
    }
  }
  for (const kind of ['codex', 'tether'] as const) {
    const sorted = [...samples[kind]].sort((a, b) => a - b);
    streamMedians[kind] = sorted[Math.floor(sorted.length / 2)] ?? Number.NaN;
    process.stderr.write(`${kind}: stream MB/s ${samples[kind].map((v) => v.toFixed(0)).join(', ')}\n`);
  }
}

const codex = await measure('codex');
const tether = await measure('tether');
rmSync(fsDir, { recursive: true, force: true });

const rows: Array<[string, number, number, string, boolean]> = [
  [
    `stream ${STREAM_MIB} MiB (MB/s)`,
    codex.streamMBps,
    tether.streamMBps,
    '≥ 1.5× codex',
    tether.streamMBps >= 1.5 * codex.streamMBps,
  ],
  [
    '`true` start→closed p50 (ms)',
    codex.trueP50Ms,
    tether.trueP50Ms,
    '≤ 0.2× codex',
    tether.trueP50Ms <= 0.2 * codex.trueP50Ms,
  ],
  [
    'PTY 1-byte echo p50 (ms)',
    codex.ptyEchoP50Ms,
    tether.ptyEchoP50Ms,
    '≤ 0.1× codex',
    tether.ptyEchoP50Ms <= 0.1 * codex.ptyEchoP50Ms,
  ],
  [
    `RSS, ${IDLE_SESSIONS} idle sessions + ${FINISHED_PROCESSES} finished (MiB)`,
    codex.idleRssMiB,
    tether.idleRssMiB,
    '< 150 MiB',
    tether.idleRssMiB < 150,
  ],
  ['peak RSS in that run (MiB)', codex.peakRssMiB, tether.peakRssMiB, '< 150 MiB', tether.peakRssMiB < 150],
  [
    `fs/readBlock ${FS_MIB} MiB, 1 MiB blocks (MB/s)`,
    codex.fsReadMBps,
    tether.fsReadMBps,
    '≥ 1.0× codex',
    tether.fsReadMBps >= codex.fsReadMBps,
  ],
  [
    `fs/writeBlock ${FS_MIB} MiB, 1 MiB blocks (MB/s)`,
    codex.fsWriteMBps,
    tether.fsWriteMBps,
    '≥ 1.0× codex',
    tether.fsWriteMBps >= codex.fsWriteMBps,
  ],
];
const fmt = (n: number) => (n >= 100 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n.toFixed(2));
const lines = [
  '| metric | codex 0.171.0 | tether | tether/codex | target | met |',
  '|---|---:|---:|---:|---|---|',
  ...rows.map(
    ([name, c, t, target, ok]) =>
      `| ${name} | ${fmt(c)} | ${fmt(t)} | ${(t / c).toFixed(2)}× | ${target} | ${ok ? 'yes' : 'NO'} |`,
  ),
];
console.log(lines.join('\n'));
writeResults('latest.json', {
  date: new Date().toISOString(),
  streamMiB: STREAM_MIB,
  fsMiB: FS_MIB,
  iterations: ITERATIONS,
  codex,
  tether,
});
