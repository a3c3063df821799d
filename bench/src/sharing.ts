/**
 * A viewer's added latency on a shared terminal: through the real registry, relay and `executor --registry`, a
 * detached PTY process (`cat`, which echoes) followed by its owner (the controller) and by another key through a
 * view share. Each round the controller types a fresh marker; the time until the echo shows at the controller and
 * at the viewer is taken, both from the keystroke. Reported: p50 and p90 of each, and of the viewer's lag behind
 * the controller. Every marker must reach both, or the run is not a figure.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { type AttachedProcess, Environment } from '@tether/client';
import { startStack } from '@tether/test-kit';
import { writeResults } from './commands.js';

const ROUNDS = Number(process.env.BENCH_SHARING_ROUNDS ?? 200);
const ENVIRONMENT = 'bench-sharing';
const work = mkdtempSync('/var/tmp/tether-bench-sharing-');

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** Resolves with the time each awaited text shows in the attachment's output. */
function watch(attached: AttachedProcess) {
  let seen = '';
  const waiting = new Map<string, (at: number) => void>();
  void (async () => {
    for await (const event of attached) {
      if (event.kind !== 'output') continue;
      seen = (seen + event.chunk.toString()).slice(-4096);
      const at = performance.now();
      for (const [text, resolve] of waiting) {
        if (!seen.includes(text)) continue;
        waiting.delete(text);
        resolve(at);
      }
    }
  })().catch(() => undefined);
  return (text: string) => new Promise<number>((resolve) => waiting.set(text, resolve));
}

const stack = await startStack();
try {
  await stack.startExecutor('tether', ENVIRONMENT);
  const viewerKey = await stack.createKey('harness', '*');
  const connect = (apiKey: string) =>
    Environment.connectRendezvous({ registryUrl: stack.registryUrl, apiKey, environmentId: ENVIRONMENT });
  const owner = await connect(stack.keys.harness);
  const other = await connect(viewerKey);
  try {
    const { processId } = await owner.spawnDetached(['cat'], { cwd: work, tty: true });
    const { token } = await owner.share(processId, { access: 'view' });
    const controller = await owner.attach(processId, { replay: false });
    const viewer = await other.attach(processId, { replay: false, shareToken: token });
    const atController = watch(controller);
    const atViewer = watch(viewer);
    const controllerMs: number[] = [];
    const viewerMs: number[] = [];
    const lagMs: number[] = [];
    for (let round = 0; round < ROUNDS + 10; round++) {
      const marker = `m${round}x${Math.random().toString(36).slice(2, 8)}`;
      const echoedHere = atController(marker);
      const echoedThere = atViewer(marker);
      const typed = performance.now();
      await controller.write(`${marker}\n`);
      const [here, there] = await Promise.all([echoedHere, echoedThere]);
      if (round < 10) continue;
      controllerMs.push(here - typed);
      viewerMs.push(there - typed);
      lagMs.push(there - here);
    }
    await owner.kill(processId, 'kill');
    const result = {
      rounds: ROUNDS,
      controller: { p50: percentile(controllerMs, 50), p90: percentile(controllerMs, 90) },
      viewer: { p50: percentile(viewerMs, 50), p90: percentile(viewerMs, 90) },
      viewerLag: { p50: percentile(lagMs, 50), p90: percentile(lagMs, 90) },
    };
    console.log(`| keystroke → echo, ${ROUNDS} rounds, registry + relay + Noise | p50 (ms) | p90 (ms) |`);
    console.log('|---|---:|---:|');
    console.log(
      `| at the controller (the owner) | ${result.controller.p50.toFixed(2)} | ${result.controller.p90.toFixed(2)} |`,
    );
    console.log(
      `| at a viewer (another key, view share) | ${result.viewer.p50.toFixed(2)} | ${result.viewer.p90.toFixed(2)} |`,
    );
    console.log(
      `| the viewer behind the controller | ${result.viewerLag.p50.toFixed(2)} | ${result.viewerLag.p90.toFixed(2)} |`,
    );
    writeResults('sharing-latest.json', result);
  } finally {
    await owner.close();
    await other.close();
  }
} finally {
  await stack.close();
  rmSync(join(work), { recursive: true, force: true });
}
