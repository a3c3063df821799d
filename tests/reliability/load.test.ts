/**
 * Load through the real path: 50 harness connections (Environments in this one process) to one executor
 * through one relay, each running 20 processes at once that print 256 KiB of the position-coded pattern.
 * Every process's output must arrive byte-exact with exit 0, and afterwards nothing may be left: the
 * executor back to its idle process and descriptor counts, the relay with no stream, this process with no
 * extra socket. Prints aggregate MB/s and the executor's peak RSS.
 */
import type { Environment } from '@tether/client';
import { cpuSeconds, type PeerHandle, peakRssMib, rssMib, type Stack, startStack } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SuiteStack } from './stacks.ts';
import {
  type Check,
  describeError,
  expectedHashes,
  KIB,
  MIB,
  type Outcome,
  SCALE,
  scaledBytes,
  settleChecks,
  startOutputCheck,
  tagOf,
  withDeadline,
} from './support.ts';

const ENVIRONMENT = 'env-reliability-load';
const CONNECTIONS = 50;
const PROCESSES_PER_CONNECTION = 20;
const BYTES_PER_PROCESS = scaledBytes(256 * KIB);
const CONNECT_DEADLINE_MS = 60_000;
const RUN_DEADLINE_MS = 150_000 * SCALE;
/** The target for the executor under this load. */
const RSS_TARGET_MB = 300;

describe(`load: ${CONNECTIONS} harness connections × ${PROCESSES_PER_CONNECTION} processes × ${BYTES_PER_PROCESS / KIB} KiB through one relay to one executor`, () => {
  const suite = new SuiteStack();
  let stack: Stack;
  let executor: PeerHandle;
  const envs = suite.envs;
  let figures: Record<string, number> | null = null;

  beforeAll(async () => {
    await suite.start(ENVIRONMENT, () => startStack());
    ({ stack, executor } = suite);
  });

  afterAll(async () => {
    await suite.close(async () => {
      await stack?.close();
      if (figures) console.log(`load figures: ${JSON.stringify(figures)}`);
    });
  });

  /** Connects one more Environment (tracked, so that one arriving after a deadline is still closed). */
  const connectOne = (): Promise<Environment> => suite.connect({ environmentId: ENVIRONMENT });

  it(`${CONNECTIONS} harnesses connecting at the same moment all get in (none refused) within ${CONNECT_DEADLINE_MS / 1000} s`, {
    timeout: CONNECT_DEADLINE_MS + 30_000,
  }, async () => {
    const started = Date.now();
    let connected = 0;
    const failures: string[] = [];
    const attempts = Array.from({ length: CONNECTIONS }, () =>
      connectOne().then(
        () => {
          connected++;
        },
        (err: unknown) => {
          failures.push(describeError(err));
        },
      ),
    );
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(attempts),
      new Promise<void>((resolve) => (timer = setTimeout(resolve, CONNECT_DEADLINE_MS))),
    ]);
    clearTimeout(timer);
    console.log(
      `load: ${connected}/${CONNECTIONS} connected at once in ${Date.now() - started} ms; ${failures.length} failed`,
    );
    const refusals = executor
      .stderr()
      .split('\n')
      .filter((line) => line.includes('refusing a stream'));
    expect(
      { connected, failures: [...new Set(failures)], executorRefusals: refusals.length },
      `all ${CONNECTIONS} connects within ${CONNECT_DEADLINE_MS} ms`,
    ).toEqual({ connected: CONNECTIONS, failures: [], executorRefusals: 0 });
  });

  it(`every process output arrives byte-exact (sha256 per process) with exit 0 (${CONNECTIONS * PROCESSES_PER_CONNECTION} processes at once)`, {
    timeout: CONNECT_DEADLINE_MS + RUN_DEADLINE_MS + 60_000,
  }, async () => {
    const tags = Array.from({ length: CONNECTIONS * PROCESSES_PER_CONNECTION }, (_, i) => tagOf('L', i));
    const hashes = expectedHashes(tags, BYTES_PER_PROCESS);

    // Whatever the concurrent connect left out is made up one at a time: this test is about the data.
    const topUpDeadline = Date.now() + CONNECT_DEADLINE_MS;
    while (envs.length < CONNECTIONS && Date.now() < topUpDeadline) {
      await withDeadline(connectOne(), CONNECT_DEADLINE_MS, () => `connection ${envs.length + 1} of ${CONNECTIONS}`);
    }
    expect(envs.length, 'connections for the run').toBe(CONNECTIONS);

    // 20 processes per connection, all at once.
    const cpuAtStart = {
      executor: cpuSeconds(executor.pid),
      relay: cpuSeconds(stack.relay.pid),
      harness: cpuSeconds('self'),
    };
    const runStarted = Date.now();
    const checks: Check[] = [];
    const startFailures: Outcome[] = [];
    await Promise.all(
      envs.map(async (env, e) => {
        await Promise.all(
          Array.from({ length: PROCESSES_PER_CONNECTION }, async (_, p) => {
            const tag = tags[e * PROCESSES_PER_CONNECTION + p] as string;
            try {
              checks.push(
                await startOutputCheck(env, tag, BYTES_PER_PROCESS, { expectedSha256: hashes.get(tag) as string }),
              );
            } catch (err) {
              startFailures.push({ name: tag, result: `spawn failed: ${describeError(err)}` });
            }
          }),
        );
      }),
    );
    const outcomes = [...startFailures, ...(await settleChecks(checks, RUN_DEADLINE_MS))];
    const seconds = (Date.now() - runStarted) / 1000;
    const deliveredBytes = checks.reduce((n, c) => n + c.bytes(), 0);
    figures = {
      processes: outcomes.length,
      deliveredMiB: Math.round((deliveredBytes / MIB) * 10) / 10,
      seconds: Math.round(seconds * 10) / 10,
      mbPerSecond: Math.round((deliveredBytes / 1e6 / seconds) * 10) / 10,
      executorPeakRssMiB: Math.round(peakRssMib(executor.pid)),
      executorRssAfterMiB: Math.round(rssMib(executor.pid)),
      // CPU seconds each process spent on the run (2 cores: which one is the bottleneck).
      cpuExecutor: Math.round((cpuSeconds(executor.pid) - cpuAtStart.executor) * 10) / 10,
      cpuRelay: Math.round((cpuSeconds(stack.relay.pid) - cpuAtStart.relay) * 10) / 10,
      cpuHarness: Math.round((cpuSeconds('self') - cpuAtStart.harness) * 10) / 10,
    };
    console.log(
      `load: ${figures.processes} processes, ${figures.deliveredMiB} MiB in ${figures.seconds} s = ` +
        `${figures.mbPerSecond} MB/s aggregate; executor peak RSS (VmHWM) ${figures.executorPeakRssMiB} MiB, ` +
        `now ${figures.executorRssAfterMiB} MiB (issue target ≤ ${RSS_TARGET_MB} MB); CPU s: executor ${figures.cpuExecutor}, ` +
        `relay ${figures.cpuRelay}, harness (this process) ${figures.cpuHarness}`,
    );
    const failed = outcomes.filter((o) => o.result !== 'ok');
    const reasons = new Map<string, number>();
    for (const o of failed) {
      const reason = o.result.replace(/[0-9a-f-]{36}/g, '<id>').replace(/\d+/g, 'N');
      reasons.set(reason, (reasons.get(reason) ?? 0) + 1);
    }
    expect(
      { failed: failed.length, reasons: Object.fromEntries(reasons), examples: failed.slice(0, 5) },
      'every process complete and exact',
    ).toEqual({ failed: 0, reasons: {}, examples: [] });
  });

  it('afterwards nothing leaks: the relay counts no stream, the executor is back to its idle processes and descriptors, this process holds no extra socket', async () => {
    await suite.expectIdle('load');
  });
});
