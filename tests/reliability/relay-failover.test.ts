/**
 * Scale-out as operators run it: three relay nodes and two registry replicas on one PostgreSQL database, as real
 * processes. The node that carries an environment is SIGKILLed mid-stream: its executor must move to a live node
 * within the stated bound (docs/relay.md, "Several relay nodes": 30 s) and the harness resume its session there with every byte
 * of every stream. Then a fourth node joins: harnesses must keep going where their executor is.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Environment } from '@tether/client';
import { pickRelayNode } from '@tether/registry';
import { patternCommand, patternSha256, repoRoot, type Stack, waitUntil } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { useStackPerTest } from './stacks.ts';
import {
  LinkLog,
  MIB,
  SCALE,
  SLOW_PACE,
  scaledBytes,
  settleChecks,
  startOutputCheck,
  streamsUnderWay,
  withDeadline,
} from './support.ts';

/** The failover bound docs/relay.md states for a node whose process dies. */
const FAILOVER_BOUND_MS = 30_000;
/** At SLOW_PACE: still running well after the kill. */
const SLOW_BYTES = scaledBytes(3 * MIB);
const SETTLE_MS = 120_000 * SCALE;

describe('relay nodes: failover and joining, three nodes and two registry replicas on PostgreSQL', () => {
  const { start, envs } = useStackPerTest();

  /**
   * `harness exec` (the CLI, no connection reuse) through registry replica `registry`: its stdout hashed as it
   * streams, and how many bytes have come so far.
   */
  const harnessExec = (stack: Stack, environmentId: string, registry: number, argv: string[]) => {
    const home = mkdtempSync(join(tmpdir(), 'tether-failover-harness-'));
    const child = spawn(
      process.execPath,
      [join(repoRoot(), 'apps', 'harness', 'bin', 'harness.js'), 'exec', '--', ...argv],
      {
        env: {
          ...process.env,
          TETHER_CONFIG: join(home, 'none.toml'),
          TETHER_REUSE: 'no',
          TETHER_HARNESS_REGISTRY: (stack.registries[registry] as { url: string }).url,
          TETHER_HARNESS_ENVIRONMENT_ID: environmentId,
          TETHER_HARNESS_API_KEY: stack.keys.harness,
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    const hash = createHash('sha256');
    let bytes = 0;
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => {
      bytes += d.byteLength;
      hash.update(d);
    });
    child.stderr.on('data', (d: Buffer) => {
      if (stderr.length < 8192) stderr += d;
    });
    const done = new Promise<{ code: number | null; sha256: string; bytes: number; stderr: string }>((resolve) =>
      child.once('close', (code) => {
        rmSync(home, { recursive: true, force: true });
        resolve({ code, sha256: hash.digest('hex'), bytes, stderr });
      }),
    );
    return { bytes: () => bytes, done, kill: () => child.kill('SIGKILL') };
  };

  const connect = (stack: Stack, environmentId: string, registry: number, log?: LinkLog) =>
    Environment.connectRendezvous({
      registryUrl: (stack.registries[registry] as { url: string }).url,
      apiKey: stack.keys.harness,
      environmentId,
      clientName: 'tether-failover',
      ...(log ? { onStatus: log.onStatus } : {}),
    });

  it(`the node carrying an environment is SIGKILLed mid-stream → its executor is on a live node within ${FAILOVER_BOUND_MS / 1000} s, the harness resumes the same session there, and every stream arrives complete and exactly once`, {
    timeout: SETTLE_MS + 120_000,
  }, async () => {
    const cluster = await start({ relays: 3, spareRelays: 0, registries: 2 });
    // The executor registers through one replica; the harness connects through the other.
    await cluster.startExecutor('tether', 'env-failover', { registry: 0 });
    const first = await cluster.carrier('env-failover');
    const others = cluster.relays.filter((r) => r !== first);
    const log = new LinkLog();
    const env = await connect(cluster, 'env-failover', 1, log);
    envs.push(env);
    const session = env.client?.sessionId;

    // The CLI too, as a person would use it: `harness exec … | sha256sum` across the kill.
    const cli = harnessExec(cluster, 'env-failover', 1, patternCommand('CLIE', SLOW_BYTES, { pace: SLOW_PACE }));
    const { checks } = await streamsUnderWay(env, {
      slowBytes: SLOW_BYTES,
      stdin: true,
      alsoUnderWay: () => cli.bytes() > 0,
    });
    const streamsOnOthers = await Promise.all(others.map((r) => r.metric('relay_streams')));
    expect(streamsOnOthers, 'the streams go through the executor’s node only').toEqual(others.map(() => 0));

    await first.kill('SIGKILL');
    const killedAt = Date.now();
    const second = await cluster.carrier('env-failover', { not: first.url, timeoutMs: FAILOVER_BOUND_MS + 10_000 });
    const movedAfterMs = Date.now() - killedAt;
    console.log(`failover: ${first.url} killed; executor linked on ${second.url} after ${movedAfterMs} ms`);
    expect(movedAfterMs, 'the executor moved within the stated bound').toBeLessThan(FAILOVER_BOUND_MS);
    expect(others).toContain(second);

    const outcomes = await settleChecks(checks, SETTLE_MS);
    console.log(`failover: ${log.disconnects} disconnects; ${log.events.join(' | ')}`);
    expect(outcomes, log.events.join(' | ')).toEqual(outcomes.map((o) => ({ name: o.name, result: 'ok' })));
    expect(log.disconnects, 'the harness noticed the node going').toBeGreaterThan(0);
    const viaCli = await withDeadline(cli.done, SETTLE_MS, () => `harness exec (${cli.bytes()} bytes so far)`).catch(
      (err: Error) => {
        cli.kill();
        throw err;
      },
    );
    expect(
      { code: viaCli.code, bytes: viaCli.bytes, sha256: viaCli.sha256 },
      `harness exec stderr: ${viaCli.stderr}`,
    ).toEqual({ code: 0, bytes: SLOW_BYTES, sha256: patternSha256('CLIE', SLOW_BYTES) });
    expect(env.client?.sessionId, 'the session resumed is the one started').toBe(session);
    expect(await second.metric('relay_sockets{role="harness"}'), 'the harness is on the new node').toBeGreaterThan(0);

    // A fresh harness through either replica lands on the new node and works.
    for (const registry of [0, 1]) {
      const fresh = await withDeadline(connect(cluster, 'env-failover', registry), 30_000, () => 'a fresh connect');
      envs.push(fresh);
      const echo = await fresh.exec(['echo', `after failover via replica ${registry}`]);
      expect(echo.stdout.toString()).toBe(`after failover via replica ${registry}\n`);
    }
  });

  it('a node joins → environments already linked stay on their node, harnesses keep working there, and executors that register from then on are spread over it too', {
    timeout: 180_000,
  }, async () => {
    const stack = await start({ relays: 3, spareRelays: 1, registries: 2 });
    const spare = stack.relays[3]!;
    const all = stack.relays.map((r) => r.url);
    // Environments the hash would send to the new node once it is live: the ones a hash-routed registry would
    // strand (their executor stays where it is) — and others, for contrast.
    const toSpare = (prefix: string, count: number, wanted: boolean) => {
      const ids: string[] = [];
      for (let n = 0; ids.length < count; n++) {
        const id = `${prefix}-${n}`;
        if ((pickRelayNode(all, id) === spare.url) === wanted) ids.push(id);
      }
      return ids;
    };
    const ids = [...toSpare('env-join', 3, true), ...toSpare('env-stay', 1, false)];
    await Promise.all(ids.map((id) => stack.startExecutor('tether', id, { registry: 0 })));
    const placed = new Map<string, string>();
    for (const id of ids) placed.set(id, (await stack.carrier(id)).url);
    expect([...placed.values()], 'nothing is on the node that is not up').not.toContain(spare.url);

    const log = new LinkLog();
    const env = await connect(stack, ids[0]!, 1, log);
    envs.push(env);
    const check = await startOutputCheck(env, 'JOIN', scaledBytes(3 * MIB), { pace: SLOW_PACE });
    await waitUntil(() => check.bytes() > 0, 'the stream to be under way', 30_000, 20);

    await spare.start();
    await waitUntil(
      async () => (await spare.metric('relay_heartbeats_total{result="ok"}')) >= 2,
      'the new node to report',
      10_000,
      50,
    );
    for (const id of ids) {
      const view = await stack.environment(id, 1);
      expect({ id, node: view?.relay_node, link: view?.relay_link }).toEqual({ id, node: placed.get(id), link: 'up' });
    }
    // New harnesses of every environment reach their executor (through either replica) and run a command.
    for (const [i, id] of ids.entries()) {
      const fresh = await withDeadline(connect(stack, id, i % 2), 30_000, () => `a connect to ${id}`);
      envs.push(fresh);
      expect((await fresh.exec(['echo', id])).stdout.toString()).toBe(`${id}\n`);
    }
    expect(await spare.metric('relay_sockets{role="harness"}'), 'no harness was sent to the new node').toBe(0);
    const [outcome] = await settleChecks([check], SETTLE_MS);
    expect(outcome).toEqual({ name: 'JOIN', result: 'ok' });
    expect(log.disconnects, 'the running session never noticed the join').toBe(0);

    // An executor registering from now on is sent by the hash over four live nodes: to the new one for this id.
    const later = toSpare('env-later', 1, true)[0]!;
    await stack.startExecutor('tether', later, { registry: 1 });
    expect((await stack.carrier(later)).url).toBe(spare.url);
    const there = await connect(stack, later, 0);
    envs.push(there);
    expect((await there.exec(['echo', 'on the new node'])).stdout.toString()).toBe('on the new node\n');
  });
});
