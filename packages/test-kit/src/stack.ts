import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { plannedPort, waitUntil } from './helpers.js';
import { apiKeyEnv, type PeerHandle, type PeerKind, registryArgs, type StartPeerOptions, startPeer } from './peer.js';
import type { RelayTap } from './relay-tap.js';
import { launch, type Service, startService, stopService } from './service.js';

/**
 * The product stack as real processes, for black-box tests: the built `registry` and `relay` bins sharing one
 * signing key, API keys for each role, and executors (ours or codex) started in remote mode against them.
 *
 * One node by default: a registry on SQLite in a scratch directory and one relay. Several relay nodes or registry
 * replicas make a cluster: the replicas share a fresh PostgreSQL database (dropped at close), and every node
 * heartbeats presence to them with a `relay` key bound to its URL; spare nodes are configured everywhere but
 * started later (a node that joins). A cluster's relay ports are chosen before anything starts, because every
 * registry must be configured with every node's URL and each node with its key; a bind can race another process
 * for that port, which startService retries.
 *
 * Every process listens on 127.0.0.1, port 0 (or the port chosen for it), carries the test-kit peer marker (a
 * run's leak check finds any that outlives it), and can be killed and restarted on its port.
 */

export interface StackOptions {
  /** Relay nodes started at once (default 1). */
  relays?: number;
  /** Relay nodes configured in every registry but started only by `StackRelay.start` (default 0). */
  spareRelays?: number;
  /** Registry replicas (default 1). More than one node or replica makes a cluster, on PostgreSQL. */
  registries?: number;
  /** A cluster's PostgreSQL URL whose user may CREATE DATABASE (default `TETHER_TEST_POSTGRES_URL` or the local server). */
  postgresAdminUrl?: string;
  /** A cluster's relay presence heartbeat interval (default 1 000 ms). */
  heartbeatIntervalMs?: number;
  /** Extra `relay serve` arguments (limits). */
  relayArgs?: string[];
  /** Extra `registry serve` arguments (e.g. `--ui-dir DIR`). */
  registryArgs?: string[];
  /** Extra environment of the registry and relay processes (OTEL_* variables, …). */
  env?: Record<string, string>;
  /**
   * One node only: puts every relay connection through this tap: the registry hands out its URL (`--relay-url`),
   * the relay announces it (`--public-url`), and the tap forwards to the relay (its target is set here). The signed
   * URLs bind no host, so they verify at the relay unchanged.
   */
  relayVia?: RelayTap;
  /**
   * One node only: the relay URL the registry hands to executors and harnesses, given the relay's own (e.g. a chaos
   * proxy started in front of it). Called once, before the registry starts. Default: the relay's own URL.
   */
  relayPublicUrl?: (relay: { url: string; host: string; port: number }) => string | Promise<string>;
}

export interface StartExecutorOptions extends Partial<Omit<StartPeerOptions, 'kind' | 'transport'>> {
  /** Wait until the relay carries this executor (default true; false when it cannot get through). */
  waitForRelay?: boolean;
  /** The registry replica it registers with (default 0). */
  registry?: number;
}

/** One relay node of a stack. */
export interface StackRelay {
  /** The node's URL (a cluster's every registry is configured with it). */
  readonly url: string;
  readonly port: number;
  /** The running process, once started. */
  readonly service: Service | null;
  alive(): boolean;
  /** Starts it (a spare joining, or a killed node coming back on its port). */
  start(): Promise<void>;
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** Its Prometheus text. */
  metrics(): Promise<string>;
  /** One sample of its Prometheus metrics (`relay_streams`, `relay_sockets{role="harness"}`); 0 when absent. */
  metric(series: string): Promise<number>;
}

/** One environment as the registry's admin view (`GET /v1/environments`) shows it. */
export interface EnvironmentView {
  environment_id: string;
  registered: boolean;
  executor_registration_id: string | null;
  epoch: number | null;
  relay_node: string | null;
  relay_link: 'up' | 'down' | 'unknown';
}

export type StackKeyRole = 'admin' | 'executor' | 'harness';

export interface Stack extends AsyncDisposable {
  readonly registries: readonly Service[];
  readonly relays: readonly StackRelay[];
  /** The first registry replica (the only one of a single node). */
  readonly registry: Service;
  /** The first relay node's process (the only one of a single node). */
  readonly relay: Service;
  /** The first registry's base URL (clients and executors use it directly). */
  readonly registryUrl: string;
  /** The first relay's own (bound) URL: its metrics, and a connection that bypasses `relayVia`. */
  readonly relayUrl: string;
  /** The relay URL the registry hands out: `relayVia`'s or `relayPublicUrl`'s when given, else `relayUrl`. */
  readonly relayPublicUrl: string;
  readonly keys: Readonly<Record<StackKeyRole, string>>;
  /** The registry's database: `sqlite:…`, or a cluster's PostgreSQL URL. */
  readonly database: string;
  /** Starts an executor serving `environmentId` and waits until the relay carries it. */
  startExecutor(kind: PeerKind, environmentId: string, options?: StartExecutorOptions): Promise<PeerHandle>;
  /** The first relay's Prometheus text, straight from the relay (never through a proxy). */
  relayMetrics(): Promise<string>;
  /** One sample of the first relay's metrics; 0 when absent. */
  relayMetric(series: string): Promise<number>;
  /**
   * Makes another API key of `role` in the registry's database, acting on the environments `glob` matches (an admin
   * key with environments may `/connect` to them).
   */
  createKey(role: StackKeyRole, glob: string, options?: { access?: 'full' | 'view' }): Promise<string>;
  /** The admin view of one environment, from replica `registry` (default 0). */
  environment(environmentId: string, registry?: number): Promise<EnvironmentView | undefined>;
  /** Resolves with the node carrying the environment once a registry reports its link up there. */
  carrier(environmentId: string, options?: { not?: string; timeoutMs?: number }): Promise<StackRelay>;
  close(): Promise<void>;
}

const DEFAULT_POSTGRES = 'postgres://postgres@127.0.0.1:5432/test';
const KEY_ROLES = ['admin', 'executor', 'harness'] as const;

/**
 * `registry keys create` arguments for a key of `role` in `database`. A key acts on no environment unless given
 * some, and these tests use many environment ids: the executor and harness keys get `'*'`. An admin key gets
 * environments only when they are given (to `/connect`: an admin sees every key's detached processes).
 */
function keyCreateArgs(database: string, role: StackKeyRole, environments?: string): string[] {
  const scope = role === 'admin' && environments === undefined ? [] : ['--environments', environments ?? '*'];
  return ['keys', 'create', '--database', database, '--role', role, ...scope];
}

/** Runs `registry keys create …` to its end; its line is the key. */
async function createKeyWith(args: string[]): Promise<string> {
  const { running, line } = await launch('registry', args);
  await running.exited;
  return line.trim();
}

/** Runs one SQL statement on the PostgreSQL server at `adminUrl`, on a connection of its own. */
export async function postgres(adminUrl: string, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

async function prometheusText(url: string): Promise<string> {
  const response = await fetch(`${url.replace('ws:', 'http:')}/metrics`, { signal: AbortSignal.timeout(5_000) });
  return response.text();
}

function sample(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return Number(line?.split(' ')[1] ?? 0);
}

export async function startStack(options: StackOptions = {}): Promise<Stack> {
  const relayCount = options.relays ?? 1;
  const nodeCount = relayCount + (options.spareRelays ?? 0);
  const cluster = nodeCount > 1 || (options.registries ?? 1) > 1;
  if (cluster && (options.relayVia || options.relayPublicUrl)) {
    throw new Error('startStack: relayVia and relayPublicUrl are for one relay node');
  }
  const adminUrl = options.postgresAdminUrl ?? process.env.TETHER_TEST_POSTGRES_URL ?? DEFAULT_POSTGRES;
  const dbName = `tether_cluster_${randomBytes(6).toString('hex')}`;
  const dir = mkdtempSync(join(tmpdir(), cluster ? 'tether-cluster-' : 'tether-stack-'));
  const executors: PeerHandle[] = [];
  const served = new WeakMap<PeerHandle, string>();
  const services: Service[] = [];
  let created = false;
  let closed: Promise<void> | null = null;
  const close = () => {
    closed ??= (async () => {
      for (const peer of executors.splice(0)) await peer.close();
      for (const service of services.splice(0).reverse()) await stopService(service);
      if (created) await postgres(adminUrl, `DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`).catch(() => {});
      rmSync(dir, { recursive: true, force: true });
    })();
    return closed;
  };
  try {
    let database = `sqlite:${join(dir, 'registry.db')}`;
    if (cluster) {
      await postgres(adminUrl, `CREATE DATABASE ${dbName}`);
      created = true;
      const url = new URL(adminUrl);
      url.pathname = `/${dbName}`;
      database = url.toString();
    }
    const keyFile = join(dir, 'signing.pem');
    writeFileSync(keyFile, generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }), {
      mode: 0o600,
    });
    const keys = { admin: '', executor: '', harness: '' };
    // The first key makes the database; the others then go in together (the store waits on the lock).
    const createKeys = async () => {
      const [first, ...rest] = KEY_ROLES;
      keys[first] = await createKeyWith(keyCreateArgs(database, first));
      await Promise.all(rest.map(async (role) => (keys[role] = await createKeyWith(keyCreateArgs(database, role)))));
    };

    // A cluster's nodes are on ports chosen now (every registry names them all); one node binds port 0.
    const ports: number[] = [];
    if (cluster) for (let i = 0; i < nodeCount; i++) ports.push(await plannedPort());
    const plannedUrls = ports.map((port) => `ws://127.0.0.1:${port}`);
    const relayTokens: string[] = [];
    const registries: Service[] = [];
    const relayArgs = (i: number, port: number): string[] => {
      const own = ['serve', '--listen', `127.0.0.1:${port}`, '--registry-key-file', keyFile];
      if (!cluster) {
        return [
          ...own,
          ...(options.relayVia ? ['--public-url', options.relayVia.url] : []),
          ...(options.relayArgs ?? []),
        ];
      }
      return [
        ...own,
        '--public-url',
        plannedUrls[i] as string,
        // Each node reports to one replica: presence is shared through the database.
        '--registry',
        (registries[i % registries.length] as Service).url,
        '--registry-token',
        relayTokens[i] as string,
        '--heartbeat-interval',
        `${options.heartbeatIntervalMs ?? 1_000}ms`,
        ...(options.relayArgs ?? []),
      ];
    };
    const relays = Array.from({ length: nodeCount }, (_, i) =>
      relayNode(i, ports[i], relayArgs, options.env, services),
    );

    if (cluster) {
      await createKeys();
      for (const url of plannedUrls) {
        relayTokens.push(
          await createKeyWith(['keys', 'create', '--database', database, '--role', 'relay', '--relay-url', url]),
        );
      }
    } else {
      // The relay starts while the keys are made: about 2 s a stack instead of 4.
      await Promise.all([(relays[0] as StackRelay).start(), createKeys()]);
    }
    const first = relays[0] as StackRelay;
    let relayPublicUrl = plannedUrls.join(',');
    if (!cluster) {
      options.relayVia?.setTarget(first.url);
      relayPublicUrl =
        options.relayVia?.url ??
        (options.relayPublicUrl
          ? await options.relayPublicUrl({ url: first.url, host: '127.0.0.1', port: first.port })
          : first.url);
    }
    for (let i = 0; i < (options.registries ?? 1); i++) {
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
      registries.push(registry);
    }
    if (cluster) for (const relay of relays.slice(0, relayCount)) await relay.start();

    const environment = async (environmentId: string, registry = 0) => {
      const response = await fetch(`${(registries[registry] as Service).url}/v1/environments`, {
        headers: { authorization: `Bearer ${keys.admin}` },
        signal: AbortSignal.timeout(5_000),
      });
      if (!response.ok) throw new Error(`GET /v1/environments: HTTP ${response.status}`);
      const body = (await response.json()) as { environments: EnvironmentView[] };
      return body.environments.find((e) => e.environment_id === environmentId);
    };
    const carrier = async (
      environmentId: string,
      { not, timeoutMs = 30_000 }: { not?: string; timeoutMs?: number } = {},
    ) => {
      let found: StackRelay | undefined;
      await waitUntil(
        async () => {
          const view = await environment(environmentId).catch(() => undefined);
          found =
            view?.relay_link === 'up' && view.relay_node !== not
              ? relays.find((r) => r.url === view.relay_node)
              : undefined;
          return found !== undefined;
        },
        `a registry to report ${environmentId}'s executor linked${not ? ` elsewhere than ${not}` : ''}`,
        timeoutMs,
        50,
      );
      return found as StackRelay;
    };
    /** One node: every environment with an executor still running is on the relay once this one is. */
    const onTheRelay = async (environmentId: string) => {
      const expected = new Set(executors.filter((p) => p.exitStatus() === undefined).map((p) => served.get(p))).size;
      await waitUntil(
        async () => (await first.metric('relay_sockets{role="environment"}')) >= expected,
        `${environmentId} to join the relay`,
        20_000,
        50,
      );
    };

    return {
      registries,
      relays,
      registry: registries[0] as Service,
      get relay() {
        return first.service as Service;
      },
      registryUrl: (registries[0] as Service).url,
      relayUrl: first.url,
      relayPublicUrl,
      keys,
      database,
      relayMetrics: () => first.metrics(),
      relayMetric: (series) => first.metric(series),
      createKey: (role, glob, options = {}) =>
        createKeyWith([
          ...keyCreateArgs(database, role, glob),
          ...(options.access ? ['--access', options.access] : []),
        ]),
      environment,
      carrier,
      async startExecutor(kind, environmentId, executorOptions = {}) {
        const { waitForRelay = true, registry = 0, ...peerOptions } = executorOptions;
        const peer = await startPeer({
          ...peerOptions,
          kind,
          transport: 'remote',
          args: [
            ...registryArgs(kind, (registries[registry] as Service).url, environmentId),
            ...(peerOptions.args ?? []),
          ],
          env: { ...apiKeyEnv(kind, keys.executor), ...peerOptions.env },
        });
        executors.push(peer);
        served.set(peer, environmentId);
        if (!waitForRelay) return peer;
        try {
          if (cluster) await carrier(environmentId, { timeoutMs: 20_000 });
          else await onTheRelay(environmentId);
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

/**
 * Relay node `i`: on `port` when chosen beforehand (a cluster), else on port 0 the first time and the bound port on
 * every restart. Its arguments are asked for when it starts, once the stack knows them.
 */
function relayNode(
  i: number,
  port: number | undefined,
  args: (i: number, port: number) => string[],
  env: Record<string, string> | undefined,
  services: Service[],
): StackRelay {
  let service: Service | null = null;
  const planned = port === undefined ? undefined : `ws://127.0.0.1:${port}`;
  const url = () => service?.url ?? planned ?? '';
  const node: StackRelay = {
    get url() {
      return url();
    },
    get port() {
      return service?.port ?? port ?? 0;
    },
    get service() {
      return service;
    },
    alive: () => service?.alive() ?? false,
    async start() {
      if (service) {
        await service.restart();
        return;
      }
      service = await startService('relay', (bound) => args(i, port ?? bound), env);
      services.push(service);
      if (planned !== undefined && service.url !== planned) {
        throw new Error(`relay came up on ${service.url}, not ${planned}`);
      }
    },
    async kill(signal: NodeJS.Signals = 'SIGKILL') {
      await service?.kill(signal);
    },
    metrics: () => prometheusText(url()),
    metric: async (series) => sample(await prometheusText(url()), series),
  };
  return node;
}
