import { type ChildProcess, spawn } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { waitUntil } from './helpers.js';
import {
  apiKeyEnv,
  type PeerExit,
  type PeerHandle,
  type PeerKind,
  peerMarkerEnv,
  registryArgs,
  repoRoot,
  startPeer,
} from './peer.js';
import { keyCreateArgs, STACK_KEY_ROLES } from './stack-keys.js';

/**
 * The product stack as real processes, like `startStack()`, for tests that break it on purpose: the
 * registry and the relay can be killed and restarted on the port they had (so URLs handed out before stay
 * valid), and the relay URL the registry hands out can point somewhere else than the relay (a chaos proxy in
 * front of it, for the harness and executor legs alike). Every child carries the test-kit peer marker, so a
 * run's leak check finds any that outlives it.
 */

export type ServiceName = 'registry' | 'relay';

/** One registry or relay process, restartable on the same port. */
export interface Service {
  readonly name: ServiceName;
  /** What it printed when it came up (`http://…` for the registry, `ws://…` for the relay). */
  readonly url: string;
  readonly port: number;
  /** Pid of the current process (-1 once stopped). */
  readonly pid: number;
  alive(): boolean;
  /** Sends `signal` (default SIGKILL) and waits for the exit. */
  kill(signal?: NodeJS.Signals): Promise<PeerExit>;
  /** Starts it again with the same arguments on the same port; resolves once it printed its URL. */
  restart(): Promise<void>;
  /** What the current process wrote on stderr (capped). */
  stderr(): string;
}

export interface ServiceStackOptions {
  /**
   * The relay URL the registry hands to executors and harnesses, given the relay's own. Default: the relay's
   * own URL. Called once, before the registry starts (e.g. to start a proxy in front of the relay).
   */
  relayPublicUrl?: (relay: { url: string; host: string; port: number }) => string | Promise<string>;
  /** Extra `relay serve` arguments (limits). */
  relayArgs?: string[];
  /** Extra `registry serve` arguments. */
  registryArgs?: string[];
  /** Extra environment of the registry and relay processes (OTEL_* variables, …). */
  env?: Record<string, string>;
}

export interface StartExecutorOptions {
  env?: Record<string, string>;
  args?: string[];
  /** Files in the executor's home (`config.toml` for its session TTL, retention, …). */
  homeFiles?: Record<string, string>;
  /** Wait until the relay counts this executor's socket (default true; false when it cannot get through). */
  waitForRelay?: boolean;
}

export interface ServiceStack extends AsyncDisposable {
  readonly registry: Service;
  readonly relay: Service;
  /** Registry base URL (clients and executors use it directly). */
  readonly registryUrl: string;
  /** The relay's own URL. */
  readonly relayUrl: string;
  /** What the registry hands out (`relayPublicUrl`, else `relayUrl`). */
  readonly relayPublicUrl: string;
  readonly keys: Readonly<Record<'admin' | 'executor' | 'harness', string>>;
  startExecutor(kind: PeerKind, environmentId: string, options?: StartExecutorOptions): Promise<PeerHandle>;
  /** The relay's Prometheus text, straight from the relay (never through the proxy). */
  relayMetrics(): Promise<string>;
  /** One sample of the relay's metrics (`relay_streams`, `relay_sockets{role="harness"}`); 0 when absent. */
  relayMetric(series: string): Promise<number>;
  close(): Promise<void>;
}

const STDERR_CAP = 64 * 1024;

interface Running {
  child: ChildProcess;
  stderr: string;
  exited: Promise<PeerExit>;
}

function bin(app: ServiceName): string {
  return join(repoRoot(), 'apps', app, 'dist', 'main.js');
}

/** Runs a registry/relay bin until it prints its first stdout line (or exits). */
export async function launch(
  app: ServiceName,
  args: string[],
  env: Record<string, string> = {},
): Promise<{ running: Running; line: string }> {
  const child = spawn(process.execPath, [bin(app), ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      ...process.env,
      TETHER_REGISTRY_LOG_LEVEL: 'warn',
      TETHER_RELAY_LOG_LEVEL: 'warn',
      ...peerMarkerEnv(),
      ...env,
    },
  });
  const exited = new Promise<PeerExit>((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  const running: Running = { child, stderr: '', exited };
  child.stderr?.on('data', (d: Buffer) => {
    if (running.stderr.length < STDERR_CAP) running.stderr += d;
  });
  let stdout = '';
  const line = await new Promise<string>((resolve, reject) => {
    child.stdout?.on('data', (d: Buffer) => {
      stdout += d;
      if (stdout.includes('\n')) resolve(stdout.split('\n')[0] as string);
    });
    void exited.then((status) =>
      reject(new Error(`${app} ${args[0]} exited (${status.signal ?? status.code}): ${running.stderr}`)),
    );
  });
  // Keep draining stdout so the child never blocks on a full pipe.
  child.stdout?.resume();
  return { running, line };
}

async function stop(running: Running, signal: NodeJS.Signals, graceMs = 5_000): Promise<PeerExit> {
  const { child } = running;
  if (child.exitCode === null && child.signalCode === null) {
    child.kill(signal);
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    try {
      return await running.exited;
    } finally {
      clearTimeout(timer);
    }
  }
  return running.exited;
}

function portOf(url: string): number {
  return Number(new URL(url.replace(/^ws/, 'http')).port);
}

/** A service started from `args(port)`: port 0 the first time, the bound one on every restart. */
export async function startService(
  name: ServiceName,
  args: (port: number) => string[],
  env: Record<string, string> = {},
): Promise<Service> {
  let { running, line } = await launch(name, args(0), env);
  const url = line.trim();
  const port = portOf(url);
  const service: Service = {
    name,
    url,
    port,
    get pid() {
      return running.child.exitCode === null && running.child.signalCode === null ? (running.child.pid ?? -1) : -1;
    },
    alive: () => running.child.exitCode === null && running.child.signalCode === null,
    kill: (signal: NodeJS.Signals = 'SIGKILL') => stop(running, signal),
    async restart() {
      if (service.alive()) throw new Error(`${name} is still running; kill it first`);
      // The port was ours a moment ago; a bind can race its release (TIME_WAIT is fine with SO_REUSEADDR,
      // which Node sets), so retry briefly rather than fail on the first EADDRINUSE.
      const deadline = Date.now() + 5_000;
      for (;;) {
        try {
          const started = await launch(name, args(port), env);
          if (started.line.trim() !== url) {
            await stop(started.running, 'SIGTERM');
            throw new Error(`${name} came back on ${started.line.trim()}, not ${url}`);
          }
          running = started.running;
          return;
        } catch (err) {
          if (!/EADDRINUSE|cannot listen/.test((err as Error).message) || Date.now() > deadline) throw err;
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
      }
    },
    stderr: () => running.stderr,
  };
  // `close()` of the stack stops whatever process is current.
  stopCurrent.set(service, () => stop(running, 'SIGTERM'));
  return service;
}

/** `executor --remote` (ours or codex) for `environmentId` on `registryUrl`, its API key in the environment. */
export function startRemoteExecutor(
  kind: PeerKind,
  registryUrl: string,
  apiKey: string,
  environmentId: string,
  options: StartExecutorOptions,
): Promise<PeerHandle> {
  return startPeer({
    kind,
    transport: 'remote',
    args: [...registryArgs(kind, registryUrl, environmentId), ...(options.args ?? [])],
    env: { ...apiKeyEnv(kind, apiKey), ...options.env },
    ...(options.homeFiles ? { homeFiles: options.homeFiles } : {}),
  });
}

const stopCurrent = new WeakMap<Service, () => Promise<PeerExit>>();

/** Stops whatever process of `service` is current (SIGTERM, then SIGKILL after a grace period). */
export function stopService(service: Service): Promise<PeerExit> | undefined {
  return stopCurrent.get(service)?.();
}

export async function startServiceStack(options: ServiceStackOptions = {}): Promise<ServiceStack> {
  const dir = mkdtempSync(join(tmpdir(), 'tether-service-stack-'));
  const executors: PeerHandle[] = [];
  const services: Service[] = [];
  let closed: Promise<void> | null = null;
  const close = () => {
    closed ??= (async () => {
      for (const peer of executors.splice(0)) await peer.close();
      for (const service of services.splice(0).reverse()) await stopCurrent.get(service)?.();
      rmSync(dir, { recursive: true, force: true });
    })();
    return closed;
  };
  try {
    const keyFile = join(dir, 'signing.pem');
    writeFileSync(keyFile, generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }), {
      mode: 0o600,
    });
    const database = `sqlite:${join(dir, 'registry.db')}`;
    const keys = { admin: '', executor: '', harness: '' };
    const createKey = async (role: (typeof STACK_KEY_ROLES)[number]) => {
      const { running, line } = await launch('registry', keyCreateArgs(database, role));
      keys[role] = line.trim();
      await running.exited;
    };
    // The first key makes the database; the others then go in together (SQLite's busy_timeout orders them).
    const [first, ...rest] = STACK_KEY_ROLES;
    await createKey(first);
    await Promise.all(rest.map(createKey));
    const relay = await startService(
      'relay',
      (port) => [
        'serve',
        '--listen',
        `127.0.0.1:${port}`,
        '--registry-key-file',
        keyFile,
        ...(options.relayArgs ?? []),
      ],
      options.env,
    );
    services.push(relay);
    const relayPublicUrl = options.relayPublicUrl
      ? await options.relayPublicUrl({ url: relay.url, host: '127.0.0.1', port: relay.port })
      : relay.url;
    const registry = await startService(
      'registry',
      (port) => [
        'serve',
        '--listen',
        `127.0.0.1:${port}`,
        '--database',
        database,
        '--signing-key-file',
        keyFile,
        '--relay-url',
        relayPublicUrl,
        ...(options.registryArgs ?? []),
      ],
      options.env,
    );
    services.push(registry);
    const relayMetrics = async () =>
      (await fetch(`${relay.url.replace('ws:', 'http:')}/metrics`, { signal: AbortSignal.timeout(5_000) })).text();
    const relayMetric = async (series: string) => {
      const line = (await relayMetrics()).split('\n').find((l) => l.startsWith(`${series} `));
      return Number(line?.split(' ')[1] ?? 0);
    };
    return {
      registry,
      relay,
      registryUrl: registry.url,
      relayUrl: relay.url,
      relayPublicUrl,
      keys,
      relayMetrics,
      relayMetric,
      async startExecutor(kind, environmentId, executorOptions = {}) {
        const peer = await startRemoteExecutor(kind, registry.url, keys.executor, environmentId, executorOptions);
        executors.push(peer);
        if (executorOptions.waitForRelay === false) return peer;
        // Every executor of this stack still running is on the relay once this one is.
        const expected = executors.filter((p) => p.exitStatus() === undefined).length;
        try {
          await waitUntil(
            async () => (await relayMetric('relay_sockets{role="environment"}')) >= expected,
            `${environmentId} to join the relay`,
            20_000,
            50,
          );
        } catch (err) {
          throw new Error(`${(err as Error).message}; executor stderr:\n${peer.stderr()}`);
        }
        return peer;
      },
      close,
      [Symbol.asyncDispose]: close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
