import { randomUUID } from 'node:crypto';
import { CHAOS_SEED_ENV, chaosSeed, findProcesses, RUN_ID_ENV } from '@tether/test-kit';

/**
 * One peer marker and one chaos seed for the whole run (every proxy of every file uses the seed, so one
 * `TETHER_CHAOS_SEED=…` replays the run's plan), and after the last file a check that nothing the suite
 * started (registry, relay, executors and their processes, all carrying the marker) is still alive.
 */
export default function setup(): () => Promise<void> {
  const runId = randomUUID();
  process.env[RUN_ID_ENV] = runId;
  const seed = chaosSeed();
  process.env[CHAOS_SEED_ENV] = String(seed);
  console.log(
    `reliability: chaos seed ${seed} (replay: ${CHAOS_SEED_ENV}=${seed}), RELIABILITY_SCALE=${process.env.RELIABILITY_SCALE ?? 1}`,
  );
  return async () => {
    let leaked = findProcesses({ peerMarker: runId });
    const deadline = Date.now() + 10_000;
    while (leaked.length > 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      leaked = findProcesses({ peerMarker: runId });
    }
    for (const p of leaked) {
      try {
        process.kill(p.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    if (leaked.length > 0) {
      throw new Error(`processes started by the reliability suite outlived it: ${JSON.stringify(leaked, null, 2)}`);
    }
    console.log(`reliability: no process of the run outlived it (chaos seed ${seed})`);
  };
}
