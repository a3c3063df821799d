/**
 * The chaos proxy itself, against a loopback echo server: transparent when told to be, deterministic per
 * seed, and each kind of fault doing what it says (held chunks keep order, a cut is a FIN, a reset an RST),
 * counted, and gone without a trace after close().
 */
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';
import {
  CHAOS_SEED_ENV,
  type ChaosProxy,
  chaosSeed,
  planConnection,
  startChaosProxy,
  waitUntil,
} from '@tether/test-kit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { expectLocalResourcesBack, type LocalResources, localResources } from './support.ts';

const quiet = () => undefined;

/** Echoes every byte back; counts the connections it saw end cleanly or abruptly. */
async function startEcho(): Promise<{ server: Server; port: number; ends: { clean: number; reset: number } }> {
  const ends = { clean: 0, reset: 0 };
  const sockets = new Set<Socket>();
  const server = createServer({ allowHalfOpen: true }, (socket) => {
    sockets.add(socket);
    socket.on('error', () => {
      ends.reset++;
    });
    socket.on('end', () => {
      ends.clean++;
      socket.end();
    });
    socket.on('close', () => sockets.delete(socket));
    socket.pipe(socket, { end: false });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  server.on('close', () => {
    for (const s of sockets) s.destroy();
  });
  return { server, port, ends };
}

/** Connects, writes `data`, and collects until `bytes` came back or the socket ended; reports how it ended. */
async function roundTrip(
  port: number,
  data: Buffer[],
  expectBytes: number,
  timeoutMs = 10_000,
): Promise<{ received: Buffer; ended: 'complete' | 'end' | 'reset' | 'timeout'; error?: string }> {
  const socket = tcpConnect({ host: '127.0.0.1', port });
  const parts: Buffer[] = [];
  let size = 0;
  return new Promise((resolve) => {
    const finish = (ended: 'complete' | 'end' | 'reset' | 'timeout', error?: string) => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ received: Buffer.concat(parts), ended, ...(error ? { error } : {}) });
    };
    const timer = setTimeout(() => finish('timeout'), timeoutMs);
    socket.on('data', (chunk: Buffer) => {
      parts.push(chunk);
      size += chunk.byteLength;
      if (size >= expectBytes) finish('complete');
    });
    socket.on('end', () => finish('end'));
    socket.on('error', (err: NodeJS.ErrnoException) => finish('reset', err.code ?? err.message));
    socket.on('connect', () => {
      for (const chunk of data) socket.write(chunk);
    });
  });
}

describe('chaos proxy (loopback TCP, seeded faults)', () => {
  let echo: Awaited<ReturnType<typeof startEcho>>;
  let baseline: LocalResources;
  const proxies: ChaosProxy[] = [];

  const proxy = async (options: Omit<Parameters<typeof startChaosProxy>[0], 'target'>) => {
    const started = await startChaosProxy({ target: { host: '127.0.0.1', port: echo.port }, log: quiet, ...options });
    proxies.push(started);
    return started;
  };

  beforeAll(async () => {
    baseline = localResources();
    echo = await startEcho();
  });

  afterEach(async () => {
    for (const p of proxies.splice(0)) await p.close();
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => echo.server.close(() => resolve()));
    await expectLocalResourcesBack(baseline);
  });

  it('without a policy, forwards 4 MiB both ways byte-exact and counts them', async () => {
    const p = await proxy({ seed: 1 });
    const data = randomBytes(4 * 1024 * 1024);
    const result = await roundTrip(p.port, [data], data.byteLength);
    expect(result.ended).toBe('complete');
    expect(result.received.equals(data)).toBe(true);
    const stats = p.stats();
    expect(stats).toMatchObject({ connections: 1, cuts: 0, resets: 0, delayedChunks: 0, upstreamFailures: 0 });
    expect(stats.bytesUp).toBe(data.byteLength);
    expect(stats.bytesDown).toBe(data.byteLength);
  });

  it('plans every connection from (seed, leg, index): same seed same fate, another seed another; windows recur until a fault strikes', () => {
    const policy = {
      cut: { probability: 0.5, afterMs: [100, 600] as const },
      reset: { probability: 0.5, afterMs: [100, 600] as const },
      delay: { probability: 0.3, minMs: 1, maxMs: 50 },
    };
    const fate = (seed: number, leg: string, index: number) => {
      const plan = planConnection(seed, leg, index, policy);
      return { cut: plan.cutAtMs, reset: plan.resetAtMs, delays: Array.from({ length: 20 }, plan.nextDelayMs) };
    };
    const plans = (seed: number) => Array.from({ length: 32 }, (_, i) => fate(seed, 'harness', i));
    expect(plans(42)).toEqual(plans(42));
    expect(plans(42)).not.toEqual(plans(43));
    expect(fate(42, 'harness', 0)).not.toEqual(fate(42, 'environment', 0));
    // Probability 1 strikes in the first window; 0.5 in the first or a later one, every connection in the end.
    const certain = Array.from({ length: 32 }, (_, i) =>
      planConnection(7, 'h', i, { cut: { probability: 1, afterMs: [100, 600] } }),
    );
    for (const plan of certain) {
      expect(plan.cutAtMs).toBeGreaterThanOrEqual(100);
      expect(plan.cutAtMs).toBeLessThanOrEqual(600);
      expect(plan.resetAtMs).toBeNull();
    }
    const all = plans(7);
    for (const { cut, reset, delays } of all) {
      for (const at of [cut, reset]) expect(at).toBeGreaterThanOrEqual(100);
      for (const ms of delays) expect(ms === 0 || (ms >= 1 && ms <= 50)).toBe(true);
    }
    const laterWindow = all.filter((p) => (p.cut as number) > 600).length;
    expect(laterWindow).toBeGreaterThan(4);
    expect(laterWindow).toBeLessThan(28);
    // A change to one kind's policy leaves the other kinds' draws where they were.
    const withoutReset = planConnection(42, 'harness', 0, { ...policy, reset: undefined });
    expect(withoutReset.cutAtMs).toBe(fate(42, 'harness', 0).cut);
    expect(withoutReset.resetAtMs).toBeNull();
    // Probability 0 never strikes.
    const none = planConnection(7, 'x', 0, { cut: { probability: 0, afterMs: [0, 0] } });
    expect(none.cutAtMs).toBeNull();
  });

  it(`takes its seed from ${CHAOS_SEED_ENV} (to replay a failing run) and prints it`, async () => {
    const saved = process.env[CHAOS_SEED_ENV];
    try {
      process.env[CHAOS_SEED_ENV] = '123456789';
      expect(chaosSeed()).toBe(123456789);
      const lines: string[] = [];
      const p = await proxy({ log: (line) => lines.push(line) });
      expect(p.seed).toBe(123456789);
      expect(lines.join('\n')).toContain(`${CHAOS_SEED_ENV}=123456789`);
      process.env[CHAOS_SEED_ENV] = 'not a number';
      expect(() => chaosSeed()).toThrow(CHAOS_SEED_ENV);
    } finally {
      if (saved === undefined) delete process.env[CHAOS_SEED_ENV];
      else process.env[CHAOS_SEED_ENV] = saved;
    }
  });

  it('holds chunks back without reordering, losing or repeating any', async () => {
    const p = await proxy({ seed: 5, policy: { delay: { probability: 0.5, minMs: 1, maxMs: 20 } } });
    // 200 numbered chunks written with pauses, so they travel as separate chunks.
    const socket = tcpConnect({ host: '127.0.0.1', port: p.port });
    await once(socket, 'connect');
    const parts: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => parts.push(chunk));
    const sent: Buffer[] = [];
    for (let i = 0; i < 200; i++) {
      const chunk = Buffer.from(`chunk ${String(i).padStart(5, '0')};`);
      sent.push(chunk);
      socket.write(chunk);
      if (i % 10 === 0) await new Promise((resolve) => setTimeout(resolve, 2));
    }
    const expected = Buffer.concat(sent);
    await waitUntil(() => Buffer.concat(parts).byteLength >= expected.byteLength, 'the echo of 200 chunks', 10_000);
    socket.destroy();
    expect(Buffer.concat(parts).toString()).toBe(expected.toString());
    expect(p.stats().delayedChunks).toBeGreaterThan(0);
    expect(p.stats().delayedMs).toBeGreaterThan(0);
  });

  it('a planned cut ends the connection with a FIN on both sides (no error), and is counted', async () => {
    const p = await proxy({ seed: 9, policy: { cut: { probability: 1, afterMs: [100, 100] } } });
    const cleanBefore = echo.ends.clean;
    const started = Date.now();
    const result = await roundTrip(p.port, [Buffer.from('hello')], 1 << 30);
    expect(result.ended).toBe('end');
    expect(result.received.toString()).toBe('hello');
    expect(Date.now() - started).toBeGreaterThanOrEqual(90);
    await waitUntil(() => echo.ends.clean > cleanBefore, 'the target to see the FIN', 5_000);
    expect(p.stats()).toMatchObject({ cuts: 1, resets: 0 });
  });

  it('a planned reset is an RST: the client gets ECONNRESET, the target an error, and it is counted', async () => {
    const p = await proxy({ seed: 9, policy: { reset: { probability: 1, afterMs: [100, 100] } } });
    const resetBefore = echo.ends.reset;
    const result = await roundTrip(p.port, [Buffer.from('hello')], 1 << 30);
    expect(result).toMatchObject({ ended: 'reset', error: 'ECONNRESET' });
    await waitUntil(() => echo.ends.reset > resetBefore, 'the target to see the RST', 5_000);
    expect(p.stats()).toMatchObject({ cuts: 0, resets: 1 });
  });

  it('a fault at 0 ms strikes while the client is still connecting (before any byte goes through)', async () => {
    const p = await proxy({ seed: 3, policy: { reset: { probability: 1, afterMs: [0, 0] } } });
    const result = await roundTrip(p.port, [Buffer.from('GET / HTTP/1.1\r\n\r\n')], 1 << 30);
    expect(['reset', 'end']).toContain(result.ended);
    expect(result.received.byteLength).toBe(0);
    expect(p.stats().resets).toBe(1);
  });

  it('classifies legs from the first bytes; each leg has its own policy and counts', async () => {
    const p = await proxy({
      seed: 11,
      classify: (head) => (head.toString().startsWith('ENV') ? 'environment' : 'harness'),
      legs: { environment: { reset: { probability: 1, afterMs: [50, 50] } } },
    });
    const [env, harness] = await Promise.all([
      roundTrip(p.port, [Buffer.from('ENV hello')], 1 << 30),
      roundTrip(p.port, [Buffer.from('HAR hello')], 9, 2_000),
    ]);
    expect(env.ended).toBe('reset');
    expect(harness).toMatchObject({ ended: 'complete' });
    expect(harness.received.toString()).toBe('HAR hello');
    expect(p.stats().byLeg).toEqual({
      environment: { connections: 1, cuts: 0, resets: 1, delayedChunks: 0 },
      harness: { connections: 1, cuts: 0, resets: 0, delayedChunks: 0 },
    });
  });

  it('setPolicy re-plans open connections of the leg; calm() cancels what was planned', async () => {
    const p = await proxy({ seed: 13 });
    const open = tcpConnect({ host: '127.0.0.1', port: p.port });
    open.on('error', () => undefined);
    await once(open, 'connect');
    await waitUntil(() => p.stats().connections === 1, 'the proxy to accept', 2_000);
    p.setPolicy({ cut: { probability: 1, afterMs: [50, 50] } });
    await once(open, 'end');
    open.destroy();
    expect(p.stats().cuts).toBe(1);

    // A connection planned to be reset at 300 ms survives when calm() comes first.
    p.setPolicy({ reset: { probability: 1, afterMs: [300, 300] } });
    const survivor = roundTrip(p.port, [], 1 << 30, 800);
    await new Promise((resolve) => setTimeout(resolve, 100));
    p.calm();
    expect((await survivor).ended).toBe('timeout');
    expect(p.stats().resets).toBe(0);
  });

  it('a target that is down looks like a refusal to the client, and is counted', async () => {
    const down = createServer();
    down.listen(0, '127.0.0.1');
    await once(down, 'listening');
    const address = down.address();
    const port = typeof address === 'object' && address ? address.port : 0;
    await new Promise<void>((resolve) => down.close(() => resolve()));
    const p = await proxy({ seed: 1 });
    p.setTarget({ host: '127.0.0.1', port });
    const result = await roundTrip(p.port, [Buffer.from('x')], 1 << 30, 5_000);
    expect(['reset', 'end']).toContain(result.ended);
    expect(p.stats().upstreamFailures).toBe(1);
  });

  it('close() ends every open connection and leaves no socket behind', async () => {
    const before = localResources();
    const p = await proxy({ seed: 1 });
    const sockets = await Promise.all(
      Array.from({ length: 10 }, async () => {
        const s = tcpConnect({ host: '127.0.0.1', port: p.port });
        s.on('error', () => undefined);
        await once(s, 'connect');
        return s;
      }),
    );
    await waitUntil(() => p.stats().open === 10, 'ten open connections', 2_000);
    const closed = sockets.map((s) => once(s, 'close'));
    await p.close();
    await Promise.all(closed);
    expect(p.stats().open).toBe(0);
    await expectLocalResourcesBack(before, 5_000);
  });
});
