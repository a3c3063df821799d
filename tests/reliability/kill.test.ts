/**
 * SIGKILL of each service in turn, mid-stream, each case on a fresh stack, with the promise after the kill
 * in the test's name. The streams: a paced producer (slower than the network, so it is still running when
 * the kill comes), a fast 16 MiB one (which outruns any retention budget while the link is down) and, where
 * the session should survive, 8 MiB of stdin into sha256sum.
 */
import type { Environment } from '@tether/client';
import { TetherError } from '@tether/client';
import { descendantPids, isAlive, type PeerHandle, type Stack, waitUntil } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { useStackPerTest } from './stacks.ts';
import {
  allOk,
  connect,
  describeError,
  LinkLog,
  MIB,
  SCALE,
  scaledBytes,
  settleChecks,
  streamsUnderWay,
  withDeadline,
} from './support.ts';

/** At SLOW_PACE 2 MiB take about 6 s, so a kill 1 s in lands mid-stream. */
const SLOW_BYTES = scaledBytes(2 * MIB);
/** How long the killed relay stays down before it is restarted. */
const RELAY_DOWN_MS = 1_500;
const SETTLE_MS = 90_000 * SCALE;
/**
 * The resume budget the executor-kill test gives its Environment (the SDK's default is 25 s: the same code path,
 * waited out faster), and the bound for the explicit error: that budget plus the last backoff (2 s) and slack.
 */
const EXECUTOR_GONE_RESUME_MS = 8_000;
const EXECUTOR_GONE_BOUND_MS = EXECUTOR_GONE_RESUME_MS + 7_000;
const SHORT_TTL_SECONDS = 3;
/** The connect budget of a connect made while the registry is down. */
const REGISTRY_DOWN_CONNECT_MS = 8_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('kills: SIGKILL of relay, registry and executor mid-stream', () => {
  const { start, envs } = useStackPerTest();

  async function setUp(
    environmentId: string,
    homeFiles?: Record<string, string>,
    reconnectTimeoutMs?: number,
  ): Promise<{ stack: Stack; executor: PeerHandle; env: Environment; log: LinkLog }> {
    const stack = await start();
    const executor = await stack.startExecutor('tether', environmentId, homeFiles ? { homeFiles } : {});
    const log = new LinkLog();
    const env = await connect({ stack, environmentId, log, ...(reconnectTimeoutMs ? { reconnectTimeoutMs } : {}) });
    envs.push(env);
    return { stack, executor, env, log };
  }

  it('relay SIGKILLed mid-stream and restarted on its port → the harness resumes the same session; every output and the stdin arrive complete and exactly once, exit 0', {
    timeout: SETTLE_MS + 90_000,
  }, async () => {
    const { stack, env, log } = await setUp('env-kill-relay');
    const sessionBefore = env.client?.sessionId;
    const { checks, at } = await streamsUnderWay(env, { slowBytes: SLOW_BYTES, stdin: true });
    await stack.relay.kill('SIGKILL');
    console.log(`kill relay: SIGKILL with ${at}; down for ${RELAY_DOWN_MS} ms`);
    await sleep(RELAY_DOWN_MS);
    await stack.relay.restart();
    const outcomes = await settleChecks(checks, SETTLE_MS);
    console.log(
      `kill relay: ${log.disconnects} disconnects, longest outage ${log.longestOutageMs()} ms; ${log.events.join(' | ')}`,
    );
    expect(log.disconnects, 'the harness noticed the relay going').toBeGreaterThan(0);
    expect(outcomes, log.events.join(' | ')).toEqual(allOk(outcomes));
    expect(env.client?.sessionId, 'the session resumed is the one started').toBe(sessionBefore);
  });

  it('registry SIGKILLed mid-stream → running sessions keep streaming to the end without a reconnect; a new connect fails with a clear registry error once its connect budget is spent, and succeeds once the registry is back on its port', {
    timeout: SETTLE_MS + 90_000,
  }, async () => {
    const { stack, env, log } = await setUp('env-kill-registry');
    const { checks, at } = await streamsUnderWay(env, { slowBytes: SLOW_BYTES, stdin: true });
    await stack.registry.kill('SIGKILL');
    console.log(`kill registry: SIGKILL with ${at}`);

    const started = Date.now();
    let refusal: unknown = null;
    try {
      envs.push(
        // The SDK tries an unreachable registry again until its connect budget (20 s by default) is spent.
        await withDeadline(
          connect({ stack, environmentId: 'env-kill-registry', connectTimeoutMs: REGISTRY_DOWN_CONNECT_MS }),
          30_000,
          () => 'a connect while the registry is down',
        ),
      );
    } catch (err) {
      refusal = err;
    }
    const refusedAfterMs = Date.now() - started;
    console.log(`kill registry: new connect refused after ${refusedAfterMs} ms: ${describeError(refusal)}`);

    const outcomes = await settleChecks(checks, SETTLE_MS);
    expect(outcomes, log.events.join(' | ')).toEqual(allOk(outcomes));
    expect(log.events, 'the running session did not even reconnect').toEqual([]);

    expect(refusal, 'a connect while the registry is down fails').toBeInstanceOf(TetherError);
    expect({ code: (refusal as TetherError).code, message: (refusal as TetherError).message }).toMatchObject({
      code: 'registry',
      message: expect.stringMatching(/cannot reach the registry/),
    });
    expect(refusedAfterMs, 'and says so once its connect budget is spent').toBeLessThan(
      REGISTRY_DOWN_CONNECT_MS + 5_000,
    );

    await stack.registry.restart();
    const after = await withDeadline(
      connect({ stack, environmentId: 'env-kill-registry' }),
      30_000,
      () => 'a connect after the registry came back',
    );
    envs.push(after);
    const echo = await withDeadline(after.exec(['echo', 'registry back']), 15_000, () => 'echo after the restart');
    expect(echo.stdout.toString()).toBe('registry back\n');
  });

  it(`executor SIGKILLed mid-stream → every pending process and the Environment end with an explicit TetherError within ${EXECUTOR_GONE_BOUND_MS / 1000} s (no hang), its processes die with it, and a new connect fails with a clear error`, {
    timeout: EXECUTOR_GONE_BOUND_MS + 120_000,
  }, async () => {
    const { stack, executor, env, log } = await setUp('env-kill-executor', undefined, EXECUTOR_GONE_RESUME_MS);
    const { checks, at } = await streamsUnderWay(env, { slowBytes: SLOW_BYTES, stdin: false });
    const children = descendantPids(executor.pid);
    executor.kill('SIGKILL');
    const killedAt = Date.now();
    console.log(`kill executor: SIGKILL with ${at} (${children.length} processes under it)`);

    const outcomes = await settleChecks(checks, EXECUTOR_GONE_BOUND_MS);
    const endedAfterMs = Date.now() - killedAt;
    console.log(`kill executor: handles ended after ${endedAfterMs} ms: ${JSON.stringify(outcomes)}`);
    // A FAST that had already finished before the kill may be 'ok'; anything else must be the explicit error.
    const rows = outcomes.map((o) => ({
      name: o.name,
      explicit: o.result === 'ok' || /TetherError\((closed|output_lost)\)/.test(o.result),
    }));
    expect(rows, JSON.stringify(outcomes)).toEqual(outcomes.map((o) => ({ name: o.name, explicit: true })));
    expect(outcomes.find((o) => o.name === 'SLOW')?.result, 'the paced stream cannot have completed').not.toBe('ok');
    expect(endedAfterMs).toBeLessThan(EXECUTOR_GONE_BOUND_MS);
    await expect(env.exec(['true']), 'the Environment itself reports the loss').rejects.toBeInstanceOf(TetherError);
    expect(log.lost, 'the SDK said the session is lost').not.toBeNull();
    // Clear: the harness is told its executor is gone, not that it was refused (nobody checked its key).
    for (const o of outcomes.filter((x) => x.result !== 'ok')) expect(o.result).not.toMatch(/authori[sz]ation/i);

    // The executor's process-group reaper ends its processes when it dies.
    await waitUntil(
      () => children.every((pid) => !isAlive(pid)),
      'the killed executor’s processes to end',
      10_000,
      100,
    );

    const started = Date.now();
    let refusal: unknown = null;
    try {
      envs.push(
        // A short connect budget (the SDK's default is 20 s): the same retries end in the same error sooner.
        await withDeadline(
          connect({ stack, environmentId: 'env-kill-executor', connectTimeoutMs: 5_000 }),
          20_000,
          () => 'a connect with no executor',
        ),
      );
    } catch (err) {
      refusal = err;
    }
    console.log(`kill executor: new connect refused after ${Date.now() - started} ms: ${describeError(refusal)}`);
    expect(refusal).toBeInstanceOf(TetherError);
    // Clear: it says the environment is not there, not that the harness was refused or the relay broke.
    expect((refusal as TetherError).message).toMatch(/offline|not connected|no executor|could not connect/i);
    expect((refusal as TetherError).message).not.toMatch(/authori[sz]ation/i);
  });

  it(`relay down longer than the executor's detach TTL (${SHORT_TTL_SECONDS} s here) → the harness gets an explicit TetherError, never a hang or silently short output`, {
    timeout: 120_000,
  }, async () => {
    const { stack, env, log } = await setUp('env-kill-relay-ttl', {
      'config.toml': `[sessions]\ndetached_ttl_sec = ${SHORT_TTL_SECONDS}\n`,
    });
    const { checks, at } = await streamsUnderWay(env, { slowBytes: SLOW_BYTES, stdin: false });
    await stack.relay.kill('SIGKILL');
    const downMs = SHORT_TTL_SECONDS * 1000 + 3_000;
    console.log(`kill relay past the TTL: SIGKILL with ${at}; down for ${downMs} ms`);
    await sleep(downMs);
    await stack.relay.restart();
    const outcomes = await settleChecks(checks, 60_000);
    console.log(`kill relay past the TTL: ${JSON.stringify(outcomes)}; link: ${log.events.join(' | ')}`);
    const rows = outcomes.map((o) => ({
      name: o.name,
      explicit: o.result === 'ok' || /TetherError\((closed|output_lost)\)/.test(o.result),
    }));
    expect(rows, JSON.stringify(outcomes)).toEqual(outcomes.map((o) => ({ name: o.name, explicit: true })));
    expect(outcomes.find((o) => o.name === 'SLOW')?.result, 'the paced stream cannot have completed').not.toBe('ok');
  });
});
