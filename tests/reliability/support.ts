/**
 * Shared pieces of the reliability suite: the scale knob, a stack with a chaos proxy in front of the relay,
 * processes whose output or stdin is checked byte for byte, deadlines that turn a hang into a failure with a
 * reason, and the leak checks every file ends with.
 */
import { type ConnectProgress, Environment, TetherError } from '@tether/client';
import {
  type ChaosPolicy,
  type ChaosProxy,
  descendantPids,
  fdCounts,
  type PatternOptions,
  PatternVerifier,
  patternBytes,
  patternCommand,
  patternSha256,
  type Stack,
  type StackOptions,
  socketPeers,
  startChaosProxy,
  startStack,
  waitUntil,
} from '@tether/test-kit';

/** `RELIABILITY_SCALE=N` multiplies sizes, durations and repetitions (default 1: the CI run, ≤ 10 min). */
export const SCALE = (() => {
  const text = process.env.RELIABILITY_SCALE;
  if (text === undefined || text === '') return 1;
  const value = Number(text);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`RELIABILITY_SCALE must be a positive number: ${text}`);
  return value;
})();

export const KIB = 1024;
export const MIB = 1024 * 1024;

/** Rounds a scaled size down to whole 64 KiB (whole pattern records, whole stdin chunks). */
export function scaledBytes(bytes: number): number {
  return Math.max(64 * KIB, Math.floor((bytes * SCALE) / (64 * KIB)) * 64 * KIB);
}

/** The leg of a connection to the relay, from its upgrade line (`…?role=environment&…`). */
export function relayLeg(head: Buffer): string {
  const text = head.toString('latin1', 0, Math.min(head.byteLength, 2048));
  if (/[?&]role=environment(&|\s)/.test(text)) return 'environment';
  if (/[?&]role=harness(&|\s)/.test(text)) return 'harness';
  return 'other';
}

/** A stack whose registry hands out a chaos proxy's URL: both relay legs go through it. */
export async function startChaosStack(
  options: Omit<StackOptions, 'relayPublicUrl'> = {},
): Promise<{ stack: Stack; proxy: ChaosProxy }> {
  let proxy: ChaosProxy | undefined;
  try {
    const stack = await startStack({
      ...options,
      relayPublicUrl: async (relay) => {
        proxy = await startChaosProxy({ target: { host: relay.host, port: relay.port }, classify: relayLeg });
        return proxy.wsUrl;
      },
    });
    return { stack, proxy: proxy as ChaosProxy };
  } catch (err) {
    await proxy?.close();
    throw err;
  }
}

/** Both legs, cuts and resets every 100–600 ms of a connection's life, plus short holds of some chunks. */
export const CUTS_EVERY_100_TO_600_MS: ChaosPolicy = {
  cut: { probability: 0.6, afterMs: [100, 600] },
  reset: { probability: 0.6, afterMs: [100, 600] },
  delay: { probability: 0.02, minMs: 5, maxMs: 60 },
};

/**
 * Rejects with `what` after `ms` (the timer never outlives the race), and with where every connect made by
 * `connect` that is still setting up (or resuming) its connection is: phase, for how long, which attempt.
 */
export async function withDeadline<T>(promise: Promise<T>, ms: number, what: () => string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const stuck = connectsInProgress();
      const where = stuck.length > 0 ? `; connects in progress: ${stuck.join(' | ')}` : '; no connect in progress';
      reject(new Error(`no answer after ${ms} ms: ${what()}${where}`));
    }, ms);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** `TetherError(code): message` or the error's message, for outcome tables. */
export function describeError(err: unknown): string {
  if (err instanceof TetherError) return `TetherError(${err.code}): ${err.message}`;
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}

/** The SDK's transport events for one Environment, and the longest time it spent without a session. */
export class LinkLog {
  readonly events: string[] = [];
  private downSince: number | null = null;
  private longest = 0;
  private readonly started = Date.now();
  lost: string | null = null;

  readonly onStatus = (status: 'disconnected' | 'reconnected' | 'lost', detail: string) => {
    const now = Date.now();
    if (this.events.length < 200) this.events.push(`+${now - this.started} ms ${status}: ${detail}`);
    if (status === 'disconnected') this.downSince ??= now;
    if (status === 'reconnected' || status === 'lost') {
      if (this.downSince !== null) this.longest = Math.max(this.longest, now - this.downSince);
      this.downSince = null;
    }
    if (status === 'lost') this.lost = detail;
  };

  get disconnects(): number {
    return this.events.filter((e) => e.includes(' disconnected:')).length;
  }

  /** Longest outage so far, counting one still going on. */
  longestOutageMs(): number {
    return Math.max(this.longest, this.downSince === null ? 0 : Date.now() - this.downSince);
  }
}

export interface ConnectOptions {
  stack: Stack;
  environmentId: string;
  log?: LinkLog;
  reconnectTimeoutMs?: number;
  /** The SDK's connect budget (its default is 20 s). */
  connectTimeoutMs?: number;
  /** How deadline messages name this connect (default `connect #N`, N counting every connect of the file). */
  label?: string;
}

export function connect(options: ConnectOptions): Promise<Environment> {
  const trace = new ConnectTrace(options.label);
  const connecting = Environment.connectRendezvous({
    registryUrl: options.stack.registryUrl,
    apiKey: options.stack.keys.harness,
    environmentId: options.environmentId,
    clientName: 'tether-reliability',
    onProgress: trace.onProgress,
    ...(options.log ? { onStatus: options.log.onStatus } : {}),
    ...(options.reconnectTimeoutMs ? { reconnect: { timeoutMs: options.reconnectTimeoutMs } } : {}),
    ...(options.connectTimeoutMs ? { connectRetry: { timeoutMs: options.connectTimeoutMs } } : {}),
  });
  connecting.then(
    (env) => trace.connected(env),
    () => trace.end(),
  );
  return connecting;
}

// Where connects are -------------------------------------------------------------------------------

/** The names of the SDK's connect phases in deadline messages. */
const PHASE_NAMES: Record<ConnectProgress['phase'], string> = {
  registry: 'registry call (/connect)',
  relay: 'relay dial (WebSocket upgrade)',
  handshake: 'Noise handshake',
  websocket: 'WebSocket upgrade',
  channel: 'channel source',
  initialize: 'initialize',
  backoff: 'retry backoff wait',
  connected: 'connected',
  failed: 'failed',
};

/** Steps kept per connect for its history in a deadline message. */
const TRACE_STEPS = 24;

/** Connects made by `connect` whose Environment is not closed yet. */
const traces = new Set<ConnectTrace>();
let tracesMade = 0;

/**
 * Where one connect is, from the SDK's `onProgress`: its current step and since when, and its recent steps
 * with their durations. It follows the session's resumes after the connect too, until its client closes.
 */
class ConnectTrace {
  readonly label: string;
  private readonly started = Date.now();
  private current: ConnectProgress | null = null;
  private since = this.started;
  private readonly steps: string[] = [];
  private env: Environment | null = null;

  constructor(label: string | undefined) {
    this.label = label ?? `connect #${++tracesMade}`;
    traces.add(this);
  }

  readonly onProgress = (progress: ConnectProgress): void => {
    const now = Date.now();
    if (this.current) this.steps.push(`#${this.current.attempt} ${this.step(this.current)} ${now - this.since} ms`);
    if (this.steps.length > TRACE_STEPS) this.steps.splice(0, this.steps.length - TRACE_STEPS);
    this.current = progress;
    this.since = now;
  };

  connected(env: Environment): void {
    this.env = env;
  }

  end(): void {
    traces.delete(this);
  }

  /** Setting up (or resuming) a connection right now. */
  get inProgress(): boolean {
    if (this.env?.client?.isClosed) {
      this.end();
      return false;
    }
    const phase = this.current?.phase;
    return phase !== 'connected' && phase !== 'failed';
  }

  describe(now = Date.now()): string {
    const where = this.current
      ? `${this.current.kind} attempt ${this.current.attempt}: ${this.step(this.current, false)} for ${now - this.since} ms`
      : `no step reported yet, for ${now - this.started} ms`;
    const history = this.steps.length > 0 ? `; before: ${this.steps.join(', ')}` : '';
    return `${this.label} (${now - this.started} ms since it began) in ${where}${history}`;
  }

  private step(progress: ConnectProgress, withKind = true): string {
    const resume = withKind && progress.kind === 'resume' ? 'resume ' : '';
    const why = progress.error === undefined ? '' : ` (${progress.error.slice(0, 200)})`;
    const pause = progress.phase === 'backoff' ? ` of ${progress.delayMs} ms` : '';
    return `${resume}${PHASE_NAMES[progress.phase]}${pause}${why}`;
  }
}

/** Every connect made by `connect` that is setting up or resuming its connection now: where it is. */
export function connectsInProgress(): string[] {
  const now = Date.now();
  return [...traces].filter((trace) => trace.inProgress).map((trace) => trace.describe(now));
}

/** What happened to one checked process: complete and exact, or why not. */
export interface Outcome {
  name: string;
  /** `ok` only when every byte arrived exactly once and the exit code is 0. */
  result: 'ok' | string;
}

/** A running check; `bytes()` is progress so far (for kill timing and hang reports). */
export interface Check {
  name: string;
  bytes(): number;
  done: Promise<Outcome>;
}

/** Starts a process printing `bytes` of the pattern tagged `tag`, and checks its stdout as it streams. */
export async function startOutputCheck(
  env: Environment,
  tag: string,
  bytes: number,
  options: PatternOptions & { expectedSha256?: string } = {},
): Promise<Check> {
  const verifier = new PatternVerifier(tag, bytes, options.expectedSha256);
  const handle = await env.spawn(patternCommand(tag, bytes, options));
  let stderr = '';
  const done = (async (): Promise<Outcome> => {
    try {
      for await (const event of handle) {
        if (event.kind !== 'output') continue;
        if (event.stream === 'stdout') verifier.update(event.chunk);
        else if (stderr.length < 4096) stderr += event.chunk.toString();
      }
      const { exitCode } = await handle.completion;
      const check = verifier.finish();
      const problems = [
        ...(check.problem ? [check.problem] : []),
        ...(exitCode !== 0 ? [`exit ${exitCode}${stderr ? ` (stderr: ${stderr.trim()})` : ''}`] : []),
      ];
      return { name: tag, result: problems.length === 0 ? 'ok' : problems.join('; ') };
    } catch (err) {
      return { name: tag, result: `failed after ${verifier.bytes} of ${bytes} bytes: ${describeError(err)}` };
    }
  })();
  return { name: tag, bytes: () => verifier.bytes, done };
}

/**
 * Starts `sha256sum` with piped stdin, feeds it `bytes` of the pattern tagged `tag` in `chunkBytes` writes
 * (each acknowledged before the next), closes stdin and checks the hash it prints: equal only if every byte
 * arrived exactly once and in order.
 */
export async function startStdinCheck(
  env: Environment,
  tag: string,
  bytes: number,
  chunkBytes = 128 * KIB,
): Promise<Check> {
  const handle = await env.spawn(['sha256sum'], { stdin: true });
  let written = 0;
  const done = (async (): Promise<Outcome> => {
    const stdout: Buffer[] = [];
    const reading = (async () => {
      for await (const event of handle)
        if (event.kind === 'output' && event.stream === 'stdout') stdout.push(event.chunk);
      return handle.completion;
    })();
    // A failed write is reported, not thrown: the read side says whether the process survived.
    reading.catch(() => undefined);
    try {
      for (let offset = 0; offset < bytes; offset += chunkBytes) {
        const chunk = patternBytes(tag, Math.min(chunkBytes, bytes - offset), offset);
        const status = await handle.write(chunk);
        if (status !== 'accepted') return { name: tag, result: `write at byte ${offset} answered ${status}` };
        written = offset + chunk.byteLength;
      }
      const closing = await handle.closeStdin();
      if (closing !== 'accepted') return { name: tag, result: `closeStdin answered ${closing}` };
      const { exitCode } = await reading;
      const printed = Buffer.concat(stdout).toString().trim().split(/\s+/)[0] ?? '';
      const expected = patternSha256(tag, bytes);
      if (exitCode !== 0) return { name: tag, result: `sha256sum exited ${exitCode}` };
      return {
        name: tag,
        result:
          printed === expected ? 'ok' : `stdin arrived altered: sha256sum printed ${printed}, expected ${expected}`,
      };
    } catch (err) {
      return { name: tag, result: `failed after writing ${written} of ${bytes} bytes: ${describeError(err)}` };
    }
  })();
  return { name: tag, bytes: () => written, done };
}

/** The pace of a slow producer: about 320 KiB/s, slower than the network, so still running when a fault comes. */
export const SLOW_PACE = { everyBytes: 32 * KIB, sleepSeconds: 0.1 };

/**
 * The streams a fault is meant to land in: SLOW (`slowBytes` of output at SLOW_PACE), FAST (16 MiB, which outruns
 * any retention budget while a link is down) and, with `stdin`, STDI (8 MiB of stdin into sha256sum). Waits until
 * each has made some progress, FAST at least 1 MiB, and `alsoUnderWay` holds: "mid-stream". Answers the checks
 * and how far each got.
 */
export async function streamsUnderWay(
  env: Environment,
  { slowBytes, stdin, alsoUnderWay = () => true }: { slowBytes: number; stdin: boolean; alsoUnderWay?: () => boolean },
): Promise<{ checks: Check[]; at: string }> {
  const checks: Check[] = [
    await startOutputCheck(env, 'SLOW', slowBytes, { pace: SLOW_PACE }),
    await startOutputCheck(env, 'FAST', scaledBytes(16 * MIB)),
    ...(stdin ? [await startStdinCheck(env, 'STDI', scaledBytes(8 * MIB))] : []),
  ];
  await waitUntil(
    () =>
      alsoUnderWay() &&
      checks.every((c) => c.bytes() > 0) &&
      (checks.find((c) => c.name === 'FAST')?.bytes() ?? 0) >= MIB,
    'every stream to be under way',
    30_000,
    20,
  );
  return { checks, at: checks.map((c) => `${c.name} at ${(c.bytes() / MIB).toFixed(2)} MiB`).join(', ') };
}

/** Waits for every check, but at most `ms`: a hang becomes a row saying how far each one got. */
export async function settleChecks(checks: Check[], ms: number): Promise<Outcome[]> {
  const outcomes = new Map<string, Outcome>();
  const all = Promise.all(checks.map(async (c) => outcomes.set(c.name, await c.done)));
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([all, new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
  return checks.map(
    (c) => outcomes.get(c.name) ?? { name: c.name, result: `no end after ${ms} ms (hang) at ${c.bytes()} bytes` },
  );
}

/** Every outcome `ok` (what the assertions compare against, so a failure lists each process's row). */
export function allOk(outcomes: Outcome[]): Outcome[] {
  return outcomes.map((o) => ({ name: o.name, result: 'ok' }));
}

/** Expected hashes, computed before a timed phase (hashing the pattern costs about as much as checking it). */
export function expectedHashes(tags: string[], bytes: number): Map<string, string> {
  return new Map(tags.map((tag) => [tag, patternSha256(tag, bytes)]));
}

/** A 4-character pattern tag from a prefix letter and a number (base 36). */
export function tagOf(prefix: string, n: number): string {
  return `${prefix}${n.toString(36).toUpperCase().padStart(3, '0')}`;
}

// Leaks -------------------------------------------------------------------------------------------

/** What this test process holds: socket descriptors, and Node's view of its TCP handles. */
export interface LocalResources {
  sockets: number;
  tcpHandles: number;
  childProcesses: number;
}

export function localResources(): LocalResources {
  const info = process.getActiveResourcesInfo();
  return {
    sockets: fdCounts('self').sockets,
    tcpHandles: info.filter((r) => r === 'TCPSocketWrap' || r === 'TCPServerWrap').length,
    childProcesses: descendantPids(process.pid).length,
  };
}

/** Waits (bounded) until this process holds no more sockets, TCP handles or children than at `baseline`. */
export async function expectLocalResourcesBack(baseline: LocalResources, timeoutMs = 10_000): Promise<void> {
  let now = localResources();
  try {
    await waitUntil(
      () => {
        now = localResources();
        return (
          now.sockets <= baseline.sockets &&
          now.tcpHandles <= baseline.tcpHandles &&
          now.childProcesses <= baseline.childProcesses
        );
      },
      'the test process to release its sockets and children',
      timeoutMs,
      100,
    );
  } catch {
    throw new Error(
      `the test process still holds more than at the start: now ${JSON.stringify(now)}, baseline ${JSON.stringify(baseline)}`,
    );
  }
}

/** Waits (bounded) until the relay counts no stream and no harness socket. */
export async function expectRelayIdle(stack: Stack, timeoutMs = 10_000): Promise<void> {
  let state = { streams: -1, harnessSockets: -1 };
  try {
    await waitUntil(
      async () => {
        state = {
          streams: await stack.relayMetric('relay_streams'),
          harnessSockets: await stack.relayMetric('relay_sockets{role="harness"}'),
        };
        return state.streams === 0 && state.harnessSockets === 0;
      },
      'the relay to count no streams',
      timeoutMs,
      100,
    );
  } catch {
    throw new Error(`the relay still has open streams: ${JSON.stringify(state)}`);
  }
}

/**
 * What the executor holds: live descendants (its processes and its process-group reaper), descriptors, and
 * how many of its TCP sockets are established connections to the registry (its HTTP keep-alive pool for
 * `/validate`: one per authorization checked at once, idle until the registry's keep-alive timeout, 72 s).
 */
export interface ExecutorResources {
  processes: number;
  fds: number;
  sockets: number;
  registrySockets: number;
}

export function executorResources(pid: number, registryPort: number): ExecutorResources {
  const { fds, sockets } = fdCounts(pid);
  const registrySockets = socketPeers(pid).filter((p) => p.remotePort === registryPort && p.state === '01').length;
  return { processes: descendantPids(pid).length, fds, sockets, registrySockets };
}

/**
 * Waits (bounded) until the executor is back to its idle baseline: no more processes than before, and its
 * descriptors within `fdSlack` of before. Idle keep-alive connections to the registry are not counted (they
 * are a pool that expires on its own, reported separately); every other descriptor is.
 */
export async function expectExecutorBack(
  pid: number,
  registryPort: number,
  baseline: ExecutorResources,
  { fdSlack = 10, timeoutMs = 15_000 }: { fdSlack?: number; timeoutMs?: number } = {},
): Promise<ExecutorResources> {
  let now = executorResources(pid, registryPort);
  const allowed = baseline.fds - baseline.registrySockets + fdSlack;
  try {
    await waitUntil(
      () => {
        now = executorResources(pid, registryPort);
        return now.processes <= baseline.processes && now.fds - now.registrySockets <= allowed;
      },
      'the executor to return to its baseline',
      timeoutMs,
      200,
    );
  } catch {
    throw new Error(
      `the executor did not return to its idle baseline within ${timeoutMs} ms: now ${JSON.stringify(now)}, baseline ${JSON.stringify(baseline)} (allowed: ${baseline.processes} processes, ${allowed} descriptors besides registry keep-alives)`,
    );
  }
  return now;
}
