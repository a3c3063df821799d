/**
 * The cost of the sandbox: a whole `true` (process/start → process/closed) over a WebSocket, unconfined and
 * under Codex's workspace-write profile, on both executors in the same run (alternating rounds, fresh peers,
 * medians of p50s). Codex's runs its command through codex-linux-sandbox and bubblewrap; ours through
 * bubblewrap alone, with the seccomp filter built in TypeScript. Target: ours ≤ 0.5× Codex's sandboxed figure.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { sandboxProfile } from '@tether/client';
import {
  codexSandboxPath,
  connect,
  fileUri,
  initialize,
  type PeerKind,
  startPeer,
  type TestClient,
} from '@tether/test-kit';

const ITERATIONS = Number(process.env.BENCH_ITERATIONS ?? 40);
const ROUNDS = Number(process.env.BENCH_SANDBOX_ROUNDS ?? 3);
const work = mkdtempSync('/var/tmp/tether-bench-sandbox-');
const workspace = join(work, 'workspace');
mkdirSync(join(workspace, '.git'), { recursive: true });
// Codex's exec-server finds its helper on the command's PATH (bubblewrap 0.8 has no --argv0).
const path = `${codexSandboxPath(work).split(':')[0]}:/usr/bin:/bin`;

// What Codex's agent sends for `-s workspace-write` (the SDK builds the same, for the harness's --sandbox).
const WORKSPACE_WRITE = sandboxProfile('workspace-write', { workspace });

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function trueP50(client: TestClient, sandbox: unknown, tag: string): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < ITERATIONS + 5; i++) {
    const id = `${tag}-${i}`;
    const t0 = performance.now();
    const closed = client.nextNotification((n) => n.method === 'process/closed' && n.params.processId === id, 15_000);
    const started = await client.request('process/start', {
      processId: id,
      argv: ['true'],
      cwd: fileUri(workspace),
      env: { PATH: path },
      tty: false,
      pipeStdin: false,
      arg0: null,
      ...(sandbox ? { sandbox } : {}),
    });
    if (started.error) throw new Error(`process/start failed: ${JSON.stringify(started.error)}`);
    await closed;
    if (i >= 5) samples.push(performance.now() - t0);
  }
  return percentile(samples, 50);
}

const results: Record<PeerKind, { plain: number[]; sandboxed: number[] }> = {
  codex: { plain: [], sandboxed: [] },
  tether: { plain: [], sandboxed: [] },
};
try {
  for (let round = 0; round < ROUNDS; round++) {
    const order: PeerKind[] = round % 2 === 0 ? ['codex', 'tether'] : ['tether', 'codex'];
    for (const kind of order) {
      process.stderr.write(`${kind}: true, unconfined and under workspace-write (round ${round + 1} of ${ROUNDS})…\n`);
      await using peer = await startPeer({ kind, transport: 'ws' });
      const client = await connect(peer);
      try {
        await initialize(client, { clientName: 'tether-bench', resumeSessionId: null });
        results[kind].plain.push(await trueP50(client, null, `plain-${round}`));
        results[kind].sandboxed.push(await trueP50(client, WORKSPACE_WRITE, `sandboxed-${round}`));
      } finally {
        await client.close();
      }
    }
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}

const median = (values: number[]) => percentile(values, 50);
const codex = { plain: median(results.codex.plain), sandboxed: median(results.codex.sandboxed) };
const tether = { plain: median(results.tether.plain), sandboxed: median(results.tether.sandboxed) };
const fmt = (n: number) => n.toFixed(2);
console.log(
  [
    '| `true` start→closed p50 (ms) | codex 0.171.0 | tether | tether/codex | target | met |',
    '|---|---:|---:|---:|---|---|',
    `| unconfined | ${fmt(codex.plain)} | ${fmt(tether.plain)} | ${(tether.plain / codex.plain).toFixed(2)}× | | |`,
    `| workspace-write | ${fmt(codex.sandboxed)} | ${fmt(tether.sandboxed)} | ${(tether.sandboxed / codex.sandboxed).toFixed(2)}× | ≤ 0.5× codex | ${tether.sandboxed <= 0.5 * codex.sandboxed ? 'yes' : 'NO'} |`,
  ].join('\n'),
);
