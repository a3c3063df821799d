import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { waitUntil } from './helpers.js';
import type { PeerHandle, PeerKind } from './peer.js';
import {
  launch,
  type Service,
  type StartExecutorOptions,
  startRemoteExecutor,
  startService,
  stopService,
} from './service-stack.js';
import { keyCreateArgs, STACK_KEY_ROLES } from './stack-keys.js';

/**
 * Tether scaled out, as real processes: registry replicas sharing one PostgreSQL database (a fresh database per
 * cluster, dropped at close) and relay nodes that heartbeat presence to them, each with a `relay` key bound to its
 * URL. Some configured nodes can be left unstarted ("spare") and started later: a node that joins. Relay ports
 * are chosen before anything starts, because every registry must be configured with every node's URL and each
 * node with its key; a bind can race another process for that port, which startService retries.
 */

export interface ClusterOptions {
  /** Relay nodes started at once (default 3). */
  relays?: number;
  /** Relay nodes configured in every registry but started only by `startRelay` (default 1). */
  spareRelays?: number;
  /** Registry replicas (default 2). */
  registries?: number;
  /** A PostgreSQL URL whose user may CREATE DATABASE (default `TETHER_TEST_POSTGRES_URL` or the local server). */
  postgresAdminUrl?: string;
  /** Relay presence heartbeat interval (default 1 000 ms). */
  heartbeatIntervalMs?: number;
  relayArgs?: string[];
  registryArgs?: string[];
}

export interface ClusterRelay {
  /** The node's URL, as every registry is configured with it. */
  readonly url: string;
  readonly port: number;
  /** The running process, once started. */
  readonly service: Service | null;
  alive(): boolean;
  /** Starts it (a spare joining, or a killed node coming back on its port). */
  start(): Promise<void>;
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** One sample of its Prometheus metrics; 0 when absent. */
  metric(series: string): Promise<number>;
}

export interface EnvironmentView {
  environment_id: string;
  registered: boolean;
  executor_registration_id: string | null;
  epoch: number | null;
  relay_node: string | null;
  relay_link: 'up' | 'down' | 'unknown';
}

export interface ClusterStack extends AsyncDisposable {
  readonly registries: readonly Service[];
  readonly relays: readonly ClusterRelay[];
  readonly keys: Readonly<Record<'admin' | 'executor' | 'harness', string>>;
  /** The PostgreSQL URL of the cluster's database. */
  readonly database: string;
  /** `executor --remote` (ours or codex) against registry replica `registry` (default 0). */
  startExecutor(
    kind: PeerKind,
    environmentId: string,
    options?: StartExecutorOptions & { registry?: number },
  ): Promise<PeerHandle>;
  /** The admin view of one environment, from replica `registry` (default 0). */
  environment(environmentId: string, registry?: number): Promise<EnvironmentView | undefined>;
  /** Resolves with the node carrying the environment once a registry reports its link up there. */
  carrier(environmentId: string, options?: { not?: string; timeoutMs?: number }): Promise<ClusterRelay>;
  close(): Promise<void>;
}

const DEFAULT_POSTGRES = 'postgres://postgres@127.0.0.1:5432/test';

/** A port free right now on 127.0.0.1 (the kernel's pick for port 0, released at once). */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

function databaseUrl(adminUrl: string, database: string): string {
  const url = new URL(adminUrl);
  url.pathname = `/${database}`;
  return url.toString();
}

export async function startClusterStack(options: ClusterOptions = {}): Promise<ClusterStack> {
  const adminUrl = options.postgresAdminUrl ?? process.env.TETHER_TEST_POSTGRES_URL ?? DEFAULT_POSTGRES;
  const dbName = `tether_cluster_${randomBytes(6).toString('hex')}`;
  const dir = mkdtempSync(join(tmpdir(), 'tether-cluster-'));
  const executors: PeerHandle[] = [];
  const services: Service[] = [];
  let created = false;
  let closed: Promise<void> | null = null;
  const admin = async (sql: string) => {
    const client = new pg.Client({ connectionString: adminUrl });
    await client.connect();
    try {
      await client.query(sql);
    } finally {
      await client.end();
    }
  };
  const close = () => {
    closed ??= (async () => {
      for (const peer of executors.splice(0)) await peer.close();
      for (const service of services.splice(0).reverse()) await stopService(service);
      if (created) await admin(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`).catch(() => {});
      rmSync(dir, { recursive: true, force: true });
    })();
    return closed;
  };
  try {
    await admin(`CREATE DATABASE ${dbName}`);
    created = true;
    const database = databaseUrl(adminUrl, dbName);
    const keyFile = join(dir, 'signing.pem');
    writeFileSync(keyFile, generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }), {
      mode: 0o600,
    });
    const createKey = async (args: string[]) => {
      const { running, line } = await launch('registry', args);
      await running.exited;
      return line.trim();
    };
    const keys = { admin: '', executor: '', harness: '' };
    for (const role of STACK_KEY_ROLES) keys[role] = await createKey(keyCreateArgs(database, role));

    const relayCount = (options.relays ?? 3) + (options.spareRelays ?? 1);
    const ports: number[] = [];
    for (let i = 0; i < relayCount; i++) ports.push(await freePort());
    const relayUrls = ports.map((port) => `ws://127.0.0.1:${port}`);
    const relayTokens: string[] = [];
    for (const url of relayUrls) {
      relayTokens.push(
        await createKey(['keys', 'create', '--database', database, '--role', 'relay', '--relay-url', url]),
      );
    }

    const registries: Service[] = [];
    for (let i = 0; i < (options.registries ?? 2); i++) {
      const registry = await startService('registry', (port) => [
        'serve',
        '--listen',
        `127.0.0.1:${port}`,
        '--database',
        database,
        '--signing-key-file',
        keyFile,
        '--relay-url',
        relayUrls.join(','),
        ...(options.registryArgs ?? []),
      ]);
      services.push(registry);
      registries.push(registry);
    }

    const relays: ClusterRelay[] = relayUrls.map((url, i) => {
      let service: Service | null = null;
      const port = ports[i] as number;
      const relay: ClusterRelay = {
        url,
        port,
        get service() {
          return service;
        },
        alive: () => service?.alive() ?? false,
        async start() {
          if (service) {
            await service.restart();
            return;
          }
          service = await startService('relay', () => [
            'serve',
            '--listen',
            `127.0.0.1:${port}`,
            '--public-url',
            url,
            // Each node reports to one replica: presence is shared through the database.
            '--registry',
            (registries[i % registries.length] as Service).url,
            '--registry-key-file',
            keyFile,
            '--registry-token',
            relayTokens[i] as string,
            '--heartbeat-interval',
            `${options.heartbeatIntervalMs ?? 1_000}ms`,
            ...(options.relayArgs ?? []),
          ]);
          if (service.url !== url) throw new Error(`relay came up on ${service.url}, not ${url}`);
          services.push(service);
        },
        async kill(signal: NodeJS.Signals = 'SIGKILL') {
          await service?.kill(signal);
        },
        async metric(series: string) {
          const text = await (
            await fetch(`${url.replace('ws:', 'http:')}/metrics`, { signal: AbortSignal.timeout(5_000) })
          ).text();
          const line = text.split('\n').find((l) => l.startsWith(`${series} `));
          return Number(line?.split(' ')[1] ?? 0);
        },
      };
      return relay;
    });
    for (const relay of relays.slice(0, options.relays ?? 3)) await relay.start();

    const environment = async (environmentId: string, registry = 0) => {
      const base = (registries[registry] as Service).url;
      const response = await fetch(`${base}/v1/environments`, {
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
      let found: ClusterRelay | undefined;
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
      return found as ClusterRelay;
    };

    return {
      registries,
      relays,
      keys,
      database,
      environment,
      carrier,
      async startExecutor(kind, environmentId, executorOptions = {}) {
        const registry = (registries[executorOptions.registry ?? 0] as Service).url;
        const peer = await startRemoteExecutor(kind, registry, keys.executor, environmentId, executorOptions);
        executors.push(peer);
        if (executorOptions.waitForRelay === false) return peer;
        try {
          await carrier(environmentId, { timeoutMs: 20_000 });
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
