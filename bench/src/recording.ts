/**
 * What recording costs (`executor --record-dir`): the same 256 MiB of text (`yes … | head -c`, pipes, SDK over
 * a direct WebSocket) from our executor without and with recording, the two alternating pair by pair in one run
 * (fresh executors, one unmeasured stream each first), medians, every byte counted, and every recording checked
 * to verify afterwards and to account for every byte: recorded, or dropped (a `tether.gap`: the worker fell more
 * than the queue bound behind), which is printed, as a figure that dropped bytes is not the cost of recording
 * them. Target: recording costs at most 5 % of the streaming throughput.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Environment } from '@tether/client';
import { GAP_TYPE, publicKeyOf, verifyRecording } from '@tether/recording';
import { type PeerHandle, startPeer } from '@tether/test-kit';
import { writeResults } from './commands.js';

const BYTES = Number(process.env.BENCH_RECORDING_BYTES ?? 256 * 1024 * 1024);
const PAIRS = Number(process.env.BENCH_RECORDING_PAIRS ?? 5);
const work = mkdtempSync('/var/tmp/tether-bench-recording-');
const recordDir = join(work, 'recordings');
const LINE = 'building target 42 of 97: src/module/file.ts -> dist/module/file.js (ok)';

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

/** MB/s of one whole stream; throws when a byte is missing. */
async function stream(env: Environment): Promise<number> {
  const t0 = performance.now();
  // Text, as a terminal session prints it (zeros would be JSON-escaped six times over: see the docs).
  const handle = await env.spawn(['sh', '-c', `yes '${LINE}' | head -c ${BYTES}`]);
  let received = 0;
  for await (const event of handle) {
    if (event.kind === 'output') received += event.chunk.length;
  }
  const { exitCode } = await handle.completion;
  const seconds = (performance.now() - t0) / 1000;
  if (exitCode !== 0 || received !== BYTES)
    throw new Error(`lost output: ${received} of ${BYTES} bytes, exit ${exitCode}`);
  return BYTES / 1e6 / seconds;
}

const peers: PeerHandle[] = [];
const envs: Environment[] = [];
try {
  const plainPeer = await startPeer({ kind: 'tether', transport: 'ws' });
  const recordedPeer = await startPeer({ kind: 'tether', transport: 'ws', args: ['--record-dir', recordDir] });
  peers.push(plainPeer, recordedPeer);
  const plain = await Environment.connectWebSocket(plainPeer.url!);
  const recorded = await Environment.connectWebSocket(recordedPeer.url!);
  envs.push(plain, recorded);
  await stream(plain);
  await stream(recorded);
  const figures = { plain: [] as number[], recorded: [] as number[] };
  for (let pair = 0; pair < PAIRS; pair++) {
    // Alternating which goes first, so that neither always has the warmer machine.
    const order = pair % 2 === 0 ? (['plain', 'recorded'] as const) : (['recorded', 'plain'] as const);
    for (const side of order) figures[side].push(await stream(side === 'plain' ? plain : recorded));
  }
  await recorded.close();
  const exit = await recordedPeer.close();
  if (exit.code !== 0) throw new Error(`the recording executor did not shut down cleanly: ${JSON.stringify(exit)}`);
  // Every recording of the run must verify and hold every byte, or the figure is not one.
  const key = publicKeyOf(readFileSync(join(recordDir, 'recording-key.pub'), 'utf8'));
  const files = readdirSync(recordDir).filter((name) => name.endsWith('.cast'));
  // What the recordings hold: output bytes, and the bytes dropped (`tether.gap`) when the worker fell behind the
  // queue bound (`--record-failure open`, the default, drops rather than slow the process).
  let recordedBytes = 0;
  let droppedBytes = 0;
  for (const name of files) {
    const text = readFileSync(join(recordDir, name), 'utf8');
    const report = verifyRecording(text, { key });
    if (!report.ok) throw new Error(`recording ${name} does not verify: ${JSON.stringify(report.problem)}`);
    for (const line of text.split('\n').slice(1)) {
      if (line === '') continue;
      const [, type, data] = JSON.parse(line) as [number, string, string];
      if (type === 'o') recordedBytes += Buffer.byteLength(data);
      else if (type === GAP_TYPE) droppedBytes += Number(data);
    }
  }
  const streamedBytes = (PAIRS + 1) * BYTES;
  if (recordedBytes + droppedBytes !== streamedBytes)
    throw new Error(`the recordings account for ${recordedBytes + droppedBytes} of ${streamedBytes} bytes`);
  const plainMBs = median(figures.plain);
  const recordedMBs = median(figures.recorded);
  const cost = 1 - recordedMBs / plainMBs;
  const result = {
    bytes: BYTES,
    pairs: PAIRS,
    plainMBs,
    recordedMBs,
    costPercent: Math.round(cost * 1000) / 10,
    recordings: files.length,
    recordedBytes,
    droppedBytes,
    samples: figures,
  };
  console.log('| stream of 256 MiB, SDK over a WebSocket | MB/s (median) |');
  console.log('|---|---:|');
  console.log(`| executor | ${plainMBs.toFixed(0)} |`);
  console.log(`| executor --record-dir | ${recordedMBs.toFixed(0)} |`);
  console.log(`recording's cost: ${result.costPercent} % (target ≤ 5 %), ${files.length} recordings, all verified`);
  const droppedPercent = ((droppedBytes / streamedBytes) * 100).toFixed(1);
  console.log(
    `recorded ${recordedBytes} of ${streamedBytes} output bytes; ${droppedBytes} (${droppedPercent} %) dropped`,
  );
  writeResults('recording-latest.json', result);
} finally {
  for (const env of envs) await env.close().catch(() => undefined);
  for (const peer of peers) await peer.close().catch(() => undefined);
  rmSync(work, { recursive: true, force: true });
}
