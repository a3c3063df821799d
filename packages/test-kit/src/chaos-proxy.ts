import { once } from 'node:events';
import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';

/**
 * A loopback TCP proxy that misbehaves on purpose, for reliability tests: it forwards every connection to
 * one target and, driven by a seeded PRNG, holds chunks back, cuts connections (FIN both ways) and resets
 * them (RST both ways) at random moments. Only ever binds 127.0.0.1.
 *
 * Determinism: every decision about a connection (will it be cut, when, which chunks are held and for how
 * long) comes from a PRNG derived from (seed, leg, index of the connection within its leg), so connection
 * #3 of the `environment` leg gets the same fate in every run with the same seed. What the OS does with the
 * timing (how bytes are split into chunks, which leg connects first) is outside the seed; a replayed seed
 * reproduces the plan, not the exact interleaving.
 */

/** Environment variable that fixes the seed (to replay the seed a failing run printed). */
export const CHAOS_SEED_ENV = 'TETHER_CHAOS_SEED';

/**
 * A fault that keeps threatening a connection: its life is cut into windows of uniform [min, max] ms (each
 * drawn anew), and at the end of each window the fault strikes with `probability`. So `{ probability: 1,
 * afterMs: [100, 600] }` ends every connection 100–600 ms after it was accepted, and 0.5 ends half of them
 * in the first window, half the rest in the second, and so on. A window starting at 0 can strike during the
 * connect itself.
 */
export interface FaultPlan {
  /** Chance per window (0…1). */
  probability: number;
  /** Length of each window: uniform in [min, max] ms. */
  afterMs: readonly [min: number, max: number];
}

export interface ChaosPolicy {
  /** Per forwarded chunk: with this probability, hold it (and everything behind it) for [minMs, maxMs]. */
  delay?: { probability: number; minMs: number; maxMs: number };
  /** End the connection (FIN to both sides, as a clean close by a middlebox). */
  cut?: FaultPlan;
  /** Reset the connection (`resetAndDestroy`: RST to both sides, as a crashed middlebox or NAT). */
  reset?: FaultPlan;
}

export interface ChaosProxyOptions {
  target: { host: string; port: number };
  /** Default: `$TETHER_CHAOS_SEED`, else random. Printed at start. */
  seed?: number;
  /** The policy of connections whose leg has none of its own (default: no faults at all). */
  policy?: ChaosPolicy;
  /** Per-leg policies, by the label `classify` gives. */
  legs?: Record<string, ChaosPolicy>;
  /**
   * Names the leg of a connection from the first bytes its client sent (e.g. the HTTP upgrade line). A
   * connection whose client sends nothing within 1 s is classified on an empty buffer.
   */
  classify?: (head: Buffer) => string;
  /** Where the seed and each fault are reported (default: the seed on console.log, faults nowhere). */
  log?: (line: string) => void;
  /** Reports every fault as it happens (default off: a chaos run injects hundreds). */
  logFaults?: boolean;
}

export interface ChaosLegStats {
  connections: number;
  cuts: number;
  resets: number;
  delayedChunks: number;
}

export interface ChaosStats extends ChaosLegStats {
  /** Connections open now. */
  open: number;
  /** Connections whose upstream could not be reached (the client was then reset). */
  upstreamFailures: number;
  /** Bytes forwarded client → target and target → client. */
  bytesUp: number;
  bytesDown: number;
  /** Total time chunks were held back, ms. */
  delayedMs: number;
  byLeg: Record<string, ChaosLegStats>;
}

export interface ChaosProxy extends AsyncDisposable {
  readonly seed: number;
  readonly host: string;
  readonly port: number;
  /** `ws://127.0.0.1:PORT` (what a relay URL pointing at the proxy looks like). */
  readonly wsUrl: string;
  stats(): ChaosStats;
  /**
   * Replaces the policy of one leg (or the default one, for legs without their own). Connections accepted
   * from now on draw their fate from it, and so do the open ones of that leg, with fault times counted from
   * now (each call is an epoch of its own in the seeded plan).
   */
  setPolicy(policy: ChaosPolicy, leg?: string): void;
  /** No more faults: drops every policy and cancels the faults planned for open connections. */
  calm(): void;
  /** Where new connections go (e.g. a service restarted on another port). */
  setTarget(target: { host: string; port: number }): void;
  /** Cuts (FIN) every open connection now, or resets (RST) them. Counted like planned faults. */
  faultAll(kind: 'cut' | 'reset'): number;
  /** Stops listening and destroys every connection; resolves once the listener is closed. */
  close(): Promise<void>;
}

// PRNG ---------------------------------------------------------------------------------------------

/** mulberry32: a small, fast 32-bit PRNG, plenty for fault plans (not for anything secret). */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A 32-bit seed for one (seed, leg, index) stream of decisions: FNV-1a over the three, then mixed. */
export function deriveSeed(seed: number, leg: string, index: number): number {
  let h = 0x811c9dc5;
  for (const byte of Buffer.from(`${seed >>> 0}/${leg}/${index}`)) {
    h ^= byte;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  // One mulberry step decorrelates seeds that differ in a single input bit.
  return Math.floor(mulberry32(h)() * 4294967296) >>> 0;
}

/** The seed from `$TETHER_CHAOS_SEED` (decimal or 0x…), else a random one. */
export function chaosSeed(): number {
  const text = process.env[CHAOS_SEED_ENV];
  if (text === undefined || text.trim() === '') return Math.floor(Math.random() * 4294967296) >>> 0;
  const value = Number(text.trim());
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new Error(`${CHAOS_SEED_ENV} must be a non-negative integer, got ${JSON.stringify(text)}`);
  }
  return value >>> 0;
}

/** The fate drawn for one connection: when (if ever) it is cut or reset, and how its chunks are held. */
export interface ConnectionPlan {
  cutAtMs: number | null;
  resetAtMs: number | null;
  /** Returns the hold time of the next chunk (0: forward at once). */
  nextDelayMs: () => number;
}

/** Bound on windows drawn for one fault (a probability of 1e-9 would otherwise loop for ever). */
const MAX_WINDOWS = 100_000;

/**
 * Draws a connection's plan (exported so that the determinism is testable without sockets). Cuts, resets and
 * holds each come from their own PRNG stream, so changing one kind's policy does not move the others.
 */
export function planConnection(seed: number, leg: string, index: number, policy: ChaosPolicy): ConnectionPlan {
  const stream = (kind: string) => mulberry32(deriveSeed(seed, `${leg}/${kind}`, index));
  /** When the fault first strikes, counted from the accept (ms), or null if it never does. */
  const firstStrike = (plan: FaultPlan | undefined, random: () => number): number | null => {
    if (!plan || plan.probability <= 0) return null;
    const [min, max] = plan.afterMs;
    let at = 0;
    for (let window = 0; window < MAX_WINDOWS; window++) {
      at += min + random() * (max - min);
      if (random() < plan.probability) return Math.round(at);
    }
    return null;
  };
  const cutAtMs = firstStrike(policy.cut, stream('cut'));
  const resetAtMs = firstStrike(policy.reset, stream('reset'));
  const delay = policy.delay;
  const holds = stream('delay');
  return {
    cutAtMs,
    resetAtMs,
    nextDelayMs: () => {
      if (!delay || delay.probability <= 0) return 0;
      // Two draws per chunk whatever the outcome, so the sequence depends on the chunk count alone.
      const hit = holds();
      const ms = delay.minMs + holds() * (delay.maxMs - delay.minMs);
      return hit < delay.probability ? Math.round(ms) : 0;
    },
  };
}

// Proxy --------------------------------------------------------------------------------------------

const CLASSIFY_WAIT_MS = 1_000;
/** After a cut, how long the two sides get to finish closing before the proxy destroys them. */
const CUT_GRACE_MS = 1_000;

function emptyLeg(): ChaosLegStats {
  return { connections: 0, cuts: 0, resets: 0, delayedChunks: 0 };
}

/** RST if the socket has a connected handle, else a plain destroy (nothing to reset yet). */
function resetSocket(socket: Socket): void {
  if (socket.destroyed) return;
  try {
    socket.resetAndDestroy();
  } catch {
    socket.destroy();
  }
}

export async function startChaosProxy(options: ChaosProxyOptions): Promise<ChaosProxy> {
  const seed = (options.seed ?? chaosSeed()) >>> 0;
  const log = options.log ?? ((line: string) => console.log(line));
  let target = { ...options.target };
  let defaultPolicy: ChaosPolicy = options.policy ?? {};
  const legPolicies = new Map<string, ChaosPolicy>(Object.entries(options.legs ?? {}));
  const connections = new Set<Connection>();
  const legIndex = new Map<string, number>();
  const totals = { upstreamFailures: 0, bytesUp: 0, bytesDown: 0, delayedMs: 0 };
  const byLeg: Record<string, ChaosLegStats> = {};
  /** Set by calm(): live connections forward without holding chunks until a policy is set again. */
  let quiet = false;
  let closing = false;

  const legStats = (leg: string) => {
    byLeg[leg] ??= emptyLeg();
    return byLeg[leg];
  };

  interface Connection {
    client: Socket;
    upstream: Socket;
    leg: string;
    /** Index of the connection within its leg (its place in the seeded plan). */
    index: number;
    plan: ConnectionPlan;
    /** Planned cuts and resets (cancelled by calm()). */
    faults: NodeJS.Timeout[];
    /** Chunks being held back (each timer writes its chunk). */
    holds: Set<NodeJS.Timeout>;
    /** The wait for the first bytes to classify on. */
    classifying: NodeJS.Timeout | null;
    faulted: boolean;
  }

  const clearTimers = (conn: Connection) => {
    for (const timer of conn.faults.splice(0)) clearTimeout(timer);
    for (const timer of conn.holds) clearTimeout(timer);
    conn.holds.clear();
    if (conn.classifying) clearTimeout(conn.classifying);
  };

  const fault = (conn: Connection, kind: 'cut' | 'reset', why: string) => {
    if (conn.faulted || conn.client.destroyed) return false;
    conn.faulted = true;
    clearTimers(conn);
    const stats = legStats(conn.leg);
    if (options.logFaults) log(`chaos-proxy: ${kind} ${conn.leg} connection (${why})`);
    if (kind === 'reset') {
      stats.resets++;
      resetSocket(conn.client);
      resetSocket(conn.upstream);
      return true;
    }
    stats.cuts++;
    // FIN both ways and forward nothing more; a side that does not finish closing in time is destroyed.
    conn.client.end();
    conn.upstream.end();
    const grace = setTimeout(() => {
      conn.client.destroy();
      conn.upstream.destroy();
    }, CUT_GRACE_MS);
    grace.unref();
    conn.client.once('close', () => clearTimeout(grace));
    return true;
  };

  /**
   * Copies `from` → `to`. A held chunk pauses `from` until it is written, so order is kept and nothing
   * queues up in the proxy; `to`'s backpressure pauses `from` the same way. Returns the chunk sink (for the
   * head read before forwarding began) and a start that resumes `from` unless something holds it.
   */
  const forward = (conn: Connection, from: Socket, to: Socket, up: boolean) => {
    let held = false;
    let blocked = false;
    let ended = false;
    const maybeResume = () => {
      if (!held && !blocked && !from.destroyed) from.resume();
    };
    const write = (chunk: Buffer) => {
      if (conn.faulted || to.destroyed || to.writableEnded) return;
      if (up) totals.bytesUp += chunk.byteLength;
      else totals.bytesDown += chunk.byteLength;
      if (!to.write(chunk)) {
        blocked = true;
        from.pause();
      }
    };
    const finish = () => {
      if (!conn.faulted && !to.destroyed && !to.writableEnded) to.end();
    };
    /** Chunks that arrived while one was held (pause() should prevent it; order must hold regardless). */
    const backlog: Buffer[] = [];
    const push = (chunk: Buffer) => {
      if (conn.faulted) return;
      if (held) {
        backlog.push(chunk);
        return;
      }
      const ms = quiet ? 0 : conn.plan.nextDelayMs();
      if (ms <= 0) {
        write(chunk);
        return;
      }
      legStats(conn.leg).delayedChunks++;
      totals.delayedMs += ms;
      held = true;
      from.pause();
      const timer = setTimeout(() => {
        conn.holds.delete(timer);
        held = false;
        write(chunk);
        for (const next of backlog.splice(0)) write(next);
        if (ended) finish();
        else maybeResume();
      }, ms);
      conn.holds.add(timer);
    };
    to.on('drain', () => {
      blocked = false;
      maybeResume();
    });
    from.on('data', push);
    // FIN travels on, after a held chunk if there is one (half-open connections stay half-open).
    from.on('end', () => {
      ended = true;
      if (!held) finish();
    });
    return { push, start: maybeResume };
  };

  const policyOf = (leg: string) => legPolicies.get(leg) ?? defaultPolicy;
  let epoch = 0;

  /** Gives `conn` a plan: its chunk delays from now, its faults at their times counted from `since`. */
  const schedule = (conn: Connection, plan: ConnectionPlan, since: number) => {
    for (const timer of conn.faults.splice(0)) clearTimeout(timer);
    conn.plan = plan;
    const age = Date.now() - since;
    for (const [kind, at] of [
      ['cut', plan.cutAtMs],
      ['reset', plan.resetAtMs],
    ] as const) {
      if (at === null || conn.faulted) continue;
      // A fault already due strikes now, before another byte is forwarded (a timer would let a loaded
      // machine pass the first exchange through before it fires).
      if (at <= age) fault(conn, kind, `planned at ${at} ms`);
      else conn.faults.push(setTimeout(() => fault(conn, kind, `planned at ${at} ms`), at - age));
    }
  };

  const server: Server = createServer({ pauseOnConnect: true, allowHalfOpen: true }, (client) => {
    if (closing) {
      client.destroy();
      return;
    }
    const acceptedAt = Date.now();
    const upstream = tcpConnect({ host: target.host, port: target.port, allowHalfOpen: true });
    upstream.pause();
    const conn: Connection = {
      client,
      upstream,
      leg: 'unclassified',
      index: 0,
      plan: planConnection(seed, 'unclassified', 0, {}),
      faults: [],
      holds: new Set(),
      classifying: null,
      faulted: false,
    };
    connections.add(conn);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    client.on('error', () => undefined);
    upstream.on('error', () => undefined);
    let upstreamUp = false;
    upstream.once('connect', () => {
      upstreamUp = true;
    });
    // An abrupt end on one side is passed on as an abrupt end (RST); a clean one went on as FIN above.
    upstream.once('close', (hadError: boolean) => {
      if (conn.faulted) return;
      if (!upstreamUp) totals.upstreamFailures++;
      if (hadError || !upstreamUp) resetSocket(client);
    });
    client.once('close', (hadError: boolean) => {
      clearTimers(conn);
      connections.delete(conn);
      if (hadError) resetSocket(upstream);
      else if (!upstream.destroyed) upstream.destroy();
    });

    const begin = (head: Buffer | null) => {
      if (client.destroyed) return;
      const leg = options.classify ? options.classify(head ?? Buffer.alloc(0)) : 'default';
      conn.leg = leg;
      const index = legIndex.get(leg) ?? 0;
      legIndex.set(leg, index + 1);
      legStats(leg).connections++;
      conn.index = index;
      // Fault times count from the accept, so a small `afterMs` strikes during the connect itself.
      schedule(conn, planConnection(seed, leg, index, quiet ? {} : policyOf(leg)), acceptedAt);
      if (conn.faulted) return;
      const upward = forward(conn, client, upstream, true);
      const downward = forward(conn, upstream, client, false);
      if (head) upward.push(head);
      upward.start();
      downward.start();
    };
    if (!options.classify) {
      begin(null);
      return;
    }
    // Classify on the first chunk the client sends (or on nothing, if it stays silent).
    const onFirst = (chunk: Buffer) => {
      if (conn.classifying) clearTimeout(conn.classifying);
      conn.classifying = null;
      client.pause();
      begin(chunk);
    };
    conn.classifying = setTimeout(() => {
      conn.classifying = null;
      client.off('data', onFirst);
      client.pause();
      begin(null);
    }, CLASSIFY_WAIT_MS);
    client.once('data', onFirst);
    client.resume();
  });
  server.on('error', () => undefined);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  log(
    `chaos-proxy: 127.0.0.1:${port} → ${target.host}:${target.port}, seed ${seed} (replay: ${CHAOS_SEED_ENV}=${seed})`,
  );

  let closed: Promise<void> | null = null;
  const close = () => {
    closed ??= (async () => {
      closing = true;
      const listenerClosed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const conn of connections) {
        clearTimers(conn);
        conn.client.destroy();
        conn.upstream.destroy();
      }
      await listenerClosed;
      // Destroyed sockets report close on later turns; wait for them so the caller's leak checks see none.
      const deadline = Date.now() + 2_000;
      while (connections.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    })();
    return closed;
  };

  return {
    seed,
    host: '127.0.0.1',
    port,
    wsUrl: `ws://127.0.0.1:${port}`,
    stats: () => {
      const legs = Object.values(byLeg);
      const sum = (key: keyof ChaosLegStats) => legs.reduce((n, leg) => n + leg[key], 0);
      return {
        connections: sum('connections'),
        cuts: sum('cuts'),
        resets: sum('resets'),
        delayedChunks: sum('delayedChunks'),
        open: connections.size,
        ...totals,
        byLeg: Object.fromEntries(Object.entries(byLeg).map(([leg, stats]) => [leg, { ...stats }])),
      };
    },
    setPolicy(policy, leg) {
      quiet = false;
      if (leg === undefined) defaultPolicy = policy;
      else legPolicies.set(leg, policy);
      epoch++;
      const now = Date.now();
      for (const conn of connections) {
        if (conn.faulted || conn.leg === 'unclassified') continue;
        if (leg === undefined ? legPolicies.has(conn.leg) : conn.leg !== leg) continue;
        schedule(conn, planConnection(seed, `${conn.leg}@${epoch}`, conn.index, policyOf(conn.leg)), now);
      }
    },
    calm() {
      quiet = true;
      defaultPolicy = {};
      legPolicies.clear();
      // Planned cuts and resets of open connections are cancelled; held chunks still go out on time.
      for (const conn of connections) for (const timer of conn.faults.splice(0)) clearTimeout(timer);
    },
    setTarget(next) {
      target = { ...next };
    },
    faultAll(kind) {
      let count = 0;
      for (const conn of [...connections]) if (fault(conn, kind, 'faultAll')) count++;
      return count;
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}
