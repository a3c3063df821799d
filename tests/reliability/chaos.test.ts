/**
 * Chaos on both relay legs: the registry hands out a chaos proxy's URL, so the harness's socket and the
 * executor's socket to the relay both go through it, and the proxy cuts (FIN) and resets (RST) them every
 * 100–600 ms of their lives, holding some chunks back besides. Under that, connects must get through, and
 * streaming output and stdin must arrive complete and exactly once (sha256 equal) once the chaos stops; the
 * only other acceptable end is the explicit error, and only after an outage longer than the detach TTL.
 */
import type { Environment } from '@tether/client';
import { type ChaosPolicy, type ChaosProxy, type Stack, waitUntil } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SuiteStack } from './stacks.ts';
import {
  type Check,
  CUTS_EVERY_100_TO_600_MS,
  describeError,
  LinkLog,
  MIB,
  type Outcome,
  SCALE,
  scaledBytes,
  settleChecks,
  startChaosStack,
  startOutputCheck,
  startStdinCheck,
  withDeadline,
} from './support.ts';

const ENVIRONMENT = 'env-reliability-chaos';
/** The executor's default (`[sessions] detached_ttl_sec`): the only outage after which an error is acceptable. */
const DETACH_TTL_MS = 30_000;
const CONNECT_ATTEMPTS = Math.max(1, Math.round(8 * SCALE));
const CONNECT_DEADLINE_MS = 30_000;
const OUTPUT_PROCESSES = 3;
const STDIN_PROCESSES = 2;
const BYTES = scaledBytes(16 * MIB);
const CHAOS_MS = 10_000 * SCALE;
/** After the chaos stops: time to finish what is left (at a few MB/s) and to recover from the last cut. */
const SETTLE_MS = 120_000 * SCALE;

/** Connect-phase chaos: faults from the first byte on, so the upgrade and the Noise handshake are hit too. */
const CONNECT_CHAOS: Record<'harness' | 'environment', ChaosPolicy> = {
  harness: {
    // Windows of 0–80 ms: a connect (bundle, upgrade, Noise handshake, initialize) takes 40–200 ms here.
    cut: { probability: 0.3, afterMs: [0, 80] },
    reset: { probability: 0.3, afterMs: [0, 80] },
    delay: { probability: 0.1, minMs: 5, maxMs: 100 },
  },
  environment: {
    cut: { probability: 0.25, afterMs: [0, 1_500] },
    reset: { probability: 0.25, afterMs: [0, 1_500] },
  },
};

describe('chaos: cuts and resets on both relay legs (seeded proxy)', () => {
  const suite = new SuiteStack();
  let stack: Stack;
  let proxy: ChaosProxy;
  const envs = suite.envs;

  /** Back to calm, and the executor on the relay again (it may be in its reconnect backoff). */
  const calmAndRejoin = async () => {
    proxy.calm();
    await waitUntil(
      async () => (await stack.relayMetric('relay_sockets{role="environment"}')) === 1,
      'the executor to be back on the relay after the chaos',
      40_000,
      100,
    );
  };

  beforeAll(async () => {
    await suite.start(ENVIRONMENT, async () => {
      ({ stack, proxy } = await startChaosStack());
      return stack;
    });
  });

  afterAll(async () => {
    proxy?.calm();
    await suite.close(async () => {
      if (proxy) console.log(`chaos: proxy totals ${JSON.stringify(proxy.stats())}`);
      await stack?.close();
      await proxy?.close();
    });
  });

  it(`connecting while both legs are cut and reset, also mid-upgrade and mid-handshake: each of ${CONNECT_ATTEMPTS} connects gets through within ${CONNECT_DEADLINE_MS / 1000} s and runs a process`, {
    timeout: CONNECT_ATTEMPTS * (2 * CONNECT_DEADLINE_MS + 15_000) + 60_000,
  }, async () => {
    const before = proxy.stats();
    proxy.setPolicy(CONNECT_CHAOS.harness, 'harness');
    proxy.setPolicy(CONNECT_CHAOS.environment, 'environment');
    const rows: Outcome[] = [];
    try {
      for (let i = 0; i < CONNECT_ATTEMPTS; i++) {
        const started = Date.now();
        let env: Environment;
        try {
          env = await withDeadline(
            suite.connect({ environmentId: ENVIRONMENT, label: `connect ${i + 1}` }),
            CONNECT_DEADLINE_MS,
            () => `connect ${i + 1}`,
          );
          rows.push({ name: `connect ${i + 1}`, result: 'ok' });
          console.log(`chaos: connect ${i + 1} in ${Date.now() - started} ms`);
        } catch (err) {
          rows.push({ name: `connect ${i + 1}`, result: `after ${Date.now() - started} ms: ${describeError(err)}` });
          continue;
        }
        // The session it opened must be usable through the same chaos (a process started and collected). Its
        // transport may be cut at once, and resuming is a connect through the same chaos: the same deadline.
        try {
          const result = await withDeadline(
            env.exec(['echo', `ok ${i}`]),
            CONNECT_DEADLINE_MS,
            () => `echo on connection ${i + 1}`,
          );
          const printed = result.stdout.toString().trim();
          rows.push({
            name: `exec on connection ${i + 1}`,
            result:
              result.exitCode === 0 && printed === `ok ${i}` ? 'ok' : `echo gave exit ${result.exitCode}: ${printed}`,
          });
        } catch (err) {
          rows.push({ name: `exec on connection ${i + 1}`, result: describeError(err) });
        }
        // Closed at once: an idle session left open would soak up the faults meant for the next connects.
        await env.close();
        envs.splice(envs.indexOf(env), 1);
      }
    } finally {
      await calmAndRejoin();
    }
    const after = proxy.stats();
    const faults = after.cuts + after.resets - before.cuts - before.resets;
    console.log(`chaos: connect phase injected ${faults} faults; ${JSON.stringify(after.byLeg)}`);
    expect(faults, 'faults injected during the connect phase').toBeGreaterThan(0);
    expect(rows).toEqual(rows.map((r) => ({ name: r.name, result: 'ok' })));
  });

  it(`${OUTPUT_PROCESSES} × ${BYTES / MIB} MiB of output and ${STDIN_PROCESSES} × ${BYTES / MIB} MiB of stdin through ${CHAOS_MS / 1000} s of cuts and resets every 100–600 ms on both legs: every byte arrives exactly once (sha256 equal) with exit 0, or — only after an outage longer than the ${DETACH_TTL_MS / 1000} s detach TTL — an explicit error`, {
    timeout: CHAOS_MS + SETTLE_MS + 90_000,
  }, async () => {
    const log = new LinkLog();
    const env = await withDeadline(
      suite.connect({ environmentId: ENVIRONMENT, log, label: 'the calm connect before the chaos' }),
      CONNECT_DEADLINE_MS,
      () => 'the calm connect before the chaos',
    );
    const checks: Check[] = [];
    for (let i = 0; i < OUTPUT_PROCESSES; i++) checks.push(await startOutputCheck(env, `OUT${i}`, BYTES));
    for (let i = 0; i < STDIN_PROCESSES; i++) checks.push(await startStdinCheck(env, `IN0${i}`, BYTES));

    const before = proxy.stats();
    proxy.setPolicy(CUTS_EVERY_100_TO_600_MS, 'harness');
    proxy.setPolicy(CUTS_EVERY_100_TO_600_MS, 'environment');
    const chaosStarted = Date.now();
    await new Promise((resolve) => setTimeout(resolve, CHAOS_MS));
    const progress = checks.map((c) => `${c.name} ${(c.bytes() / MIB).toFixed(1)} MiB`).join(', ');
    await calmAndRejoin();
    const after = proxy.stats();
    const faults = after.cuts + after.resets - before.cuts - before.resets;
    console.log(
      `chaos: ${faults} faults in ${Date.now() - chaosStarted} ms (${JSON.stringify(after.byLeg)}); at the end of the chaos: ${progress}`,
    );

    const outcomes = await settleChecks(checks, SETTLE_MS);
    const outage = log.longestOutageMs();
    console.log(
      `chaos: harness saw ${log.disconnects} disconnects, longest outage ${outage} ms${log.lost ? `, lost: ${log.lost}` : ''}`,
    );
    // An error is acceptable only as the explicit one (a TetherError), and only after an outage past the TTL.
    const rows = outcomes.map((o) => ({
      name: o.name,
      result:
        o.result !== 'ok' && outage >= DETACH_TTL_MS && /TetherError\((output_lost|closed)\)/.test(o.result)
          ? 'ok'
          : o.result,
    }));
    expect(faults, 'faults injected during the streaming phase').toBeGreaterThan(0);
    expect(rows, `longest outage ${outage} ms; link events: ${log.events.slice(0, 12).join(' | ')}`).toEqual(
      rows.map((r) => ({ name: r.name, result: 'ok' })),
    );
  });

  it('after the chaos, a session still works and nothing is left: relay without streams, executor at its idle baseline, no extra socket here', async () => {
    const env = await withDeadline(
      suite.connect({ environmentId: ENVIRONMENT, label: 'a calm connect after the chaos' }),
      CONNECT_DEADLINE_MS,
      () => 'a calm connect after the chaos',
    );
    const result = await withDeadline(env.exec(['echo', 'still here']), 15_000, () => 'echo after the chaos');
    expect(result.stdout.toString()).toBe('still here\n');
    // The executor's processes of a session the harness left while detached are ended by the TTL at the latest.
    await suite.expectIdle('chaos', DETACH_TTL_MS + 15_000);
  });
});
