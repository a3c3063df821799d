import { randomUUID } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findProcesses, RUN_ID_ENV } from '@tether/test-kit';
import { CONFORMANCE_ROOT_ENV } from './support.ts';

/**
 * Gives the whole run one peer marker and one scratch root, and after every test file finished
 * fails the run if any peer (codex or tether) or any child started under the scratch root is alive.
 */
export default function setup(): () => Promise<void> {
  const runId = randomUUID();
  const root = join(tmpdir(), `tether-conformance-${runId}`);
  mkdirSync(root, { recursive: true });
  process.env[RUN_ID_ENV] = runId;
  process.env[CONFORMANCE_ROOT_ENV] = root;
  return async () => {
    let leaked = findProcesses({ cwdUnder: root, peerMarker: runId });
    const deadline = Date.now() + 10_000;
    while (leaked.length > 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      leaked = findProcesses({ cwdUnder: root, peerMarker: runId });
    }
    for (const p of leaked) {
      try {
        process.kill(p.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    rmSync(root, { recursive: true, force: true });
    if (leaked.length > 0) {
      throw new Error(`processes started by the suite outlived it: ${JSON.stringify(leaked, null, 2)}`);
    }
  };
}
