/**
 * `pnpm bench` (registry section; alone: `pnpm --filter @tether/bench bench:registry-replicas`): the registry's
 * `/connect` + `/validate` throughput as the protocol uses them, on one replica on SQLite, one on PostgreSQL and
 * two on one PostgreSQL database (and, to show what the database's commit flush costs, two with PostgreSQL's
 * synchronous_commit off). A pair is one harness `/connect` followed by the executor's `/validate` of the
 * authorization it returned (rendezvous.md §1); N clients run pairs back to back over keep-alive connections for
 * a fixed time. With two replicas each client asks one replica for the bundle and the other validates it, so
 * every pair crosses replicas through the shared database. Every answer is checked (200, `valid: true`): one
 * wrong answer fails the run.
 *
 * Each configuration starts from nothing: a fresh SQLite file or a fresh PostgreSQL database
 * (`CREATE DATABASE bench_<random>`, dropped after, also on failure or Ctrl-C), keys made with
 * `registry keys create`, real `registry serve` processes on 127.0.0.1 port 0 sharing one signing key, one
 * executor registered. All are deployed first, then measured in turn (one run of each per round, after a
 * warm-up second). Prints a table and writes bench/results/registry-replicas-latest.json.
 *
 *   BENCH_REGISTRY_CLIENTS=16,64 BENCH_REGISTRY_SECONDS=3 BENCH_REGISTRY_WARMUP_SECONDS=1 \
 *   BENCH_REGISTRY_REPEATS=5 BENCH_REGISTRY_ONLY=sqlite,pg1,pg2,pg2-async \
 *   BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres pnpm bench
 */

import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { generateIdentity, publicKeyToJson } from '@tether/noise';
import { machine, writeResults } from './commands.js';
import {
  backendPids,
  cpuSecondsOf,
  createPostgresDatabase,
  median,
  onCleanup,
  percentile,
  runBench,
  runBin,
  type ServiceProcess,
  startService,
} from './services.js';

const CLIENTS = (process.env.BENCH_REGISTRY_CLIENTS ?? '16,64').split(',').map(Number);
const SECONDS = Number(process.env.BENCH_REGISTRY_SECONDS ?? 3);
const WARMUP_SECONDS = Number(process.env.BENCH_REGISTRY_WARMUP_SECONDS ?? 1);
const REPEATS = Number(process.env.BENCH_REGISTRY_REPEATS ?? 5);
const ENVIRONMENT = 'bench-env';
/** Extra node flags for the replicas (e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`). */
const NODE_ARGS = (process.env.BENCH_REGISTRY_NODE_ARGS ?? '').split(' ').filter(Boolean);

type Engine = 'sqlite' | 'postgres';
interface Setup {
  id: string;
  name: string;
  engine: Engine;
  replicas: number;
  /** PostgreSQL settings of the fresh database. */
  settings?: Record<string, string>;
}
const ALL_SETUPS: Setup[] = [
  { id: 'sqlite', name: '1 replica, SQLite', engine: 'sqlite', replicas: 1 },
  { id: 'pg1', name: '1 replica, PostgreSQL', engine: 'postgres', replicas: 1 },
  { id: 'pg2', name: '2 replicas, one PostgreSQL', engine: 'postgres', replicas: 2 },
  // Not a deployment to copy: a commit is acknowledged before its WAL is on disk, so a crash can lose the last
  // consumptions and an authorization could validate twice. It shows what the registry does once the database's
  // commit flush (fdatasync of the WAL, milliseconds on a VM disk) is out of the way.
  {
    id: 'pg2-async',
    name: '2 replicas, one PostgreSQL, synchronous_commit=off',
    engine: 'postgres',
    replicas: 2,
    settings: { synchronous_commit: 'off' },
  },
];
const ONLY = process.env.BENCH_REGISTRY_ONLY?.split(',');
const SETUPS = ALL_SETUPS.filter((setup) => !ONLY || ONLY.includes(setup.id));

// HTTP ---------------------------------------------------------------------------------------------------

interface Replica {
  base: URL;
  agent: Agent;
}

/** One POST with a JSON body on a keep-alive agent; resolves with the status and the parsed answer. */
function post(replica: Replica, path: string, token: string, body: string): Promise<{ status: number; json: unknown }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: replica.base.hostname,
        port: replica.base.port,
        path,
        method: 'POST',
        agent: replica.agent,
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.once('error', reject);
        res.once('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          try {
            resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) });
          } catch {
            reject(new Error(`${path}: HTTP ${res.statusCode}, not JSON: ${text.slice(0, 200)}`));
          }
        });
      },
    );
    req.once('error', reject);
    req.end(body);
  });
}

// One configuration ---------------------------------------------------------------------------------------

interface Deployment {
  replicas: ServiceProcess[];
  /** The PostgreSQL database's name (null on SQLite). */
  database: string | null;
  executorToken: string;
  harnessToken: string;
  registrationId: string;
  close(): Promise<void>;
}

async function deploy(setup: Setup): Promise<Deployment> {
  const dir = mkdtempSync(join(tmpdir(), 'registry-bench-'));
  const removeDir = onCleanup(async () => rmSync(dir, { recursive: true, force: true }));
  const ends: Array<() => Promise<void>> = [removeDir];
  let databaseName: string | null = null;
  const database =
    setup.engine === 'sqlite'
      ? `sqlite:${join(dir, 'registry.db')}`
      : await createPostgresDatabase(setup.settings).then((db) => {
          ends.unshift(db.drop);
          databaseName = db.name;
          return db.url;
        });
  const signingKey = join(dir, 'signing.pem');
  writeFileSync(signingKey, generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }), {
    mode: 0o600,
  });
  // Keys first: `keys create` runs the migrations, so the replicas start on a migrated database.
  const key = async (role: 'executor' | 'harness') =>
    (await runBin('registry', ['keys', 'create', '--database', database, '--role', role, '--environments', '*']))
      .trim()
      .split('\n')[0] as string;
  const executorToken = await key('executor');
  const harnessToken = await key('harness');
  const replicas: ServiceProcess[] = [];
  for (let i = 0; i < setup.replicas; i++) {
    const replica = await startService(
      'registry',
      [
        'serve',
        '--listen',
        '127.0.0.1:0',
        '--database',
        database,
        '--signing-key-file',
        signingKey,
        '--relay-url',
        'ws://127.0.0.1:9',
        '--log-level',
        'warn',
        // A throughput benchmark from one key and one address: the rate limits are lifted (their cost stays).
        '--rate-limit-per-key',
        '1000000000',
        '--rate-limit-unauthenticated',
        '1000000000',
      ],
      { nodeArgs: NODE_ARGS },
    );
    replicas.push(replica);
    ends.unshift(replica.close);
  }
  const first: Replica = { base: new URL((replicas[0] as ServiceProcess).url), agent: new Agent({ keepAlive: false }) };
  const registered = await post(
    first,
    `/cloud/environment/${ENVIRONMENT}/register`,
    executorToken,
    JSON.stringify({
      security_profile: 'noise_hybrid_ik_v1',
      executor_public_key: publicKeyToJson(generateIdentity().publicKey),
    }),
  );
  first.agent.destroy();
  const registrationId = (registered.json as { executor_registration_id?: string }).executor_registration_id;
  if (registered.status !== 200 || typeof registrationId !== 'string') {
    throw new Error(`register: HTTP ${registered.status} ${JSON.stringify(registered.json)}`);
  }
  return {
    replicas,
    database: databaseName,
    executorToken,
    harnessToken,
    registrationId,
    close: async () => {
      for (const end of ends) await end();
    },
  };
}

interface Run {
  pairsPerSecond: number;
  p50: number;
  p99: number;
  pairs: number;
  /** Registry CPU (all replicas) per pair, in ms. */
  cpuMsPerPair: number;
  /** CPU of the PostgreSQL backends serving the replicas per pair, in ms (null on SQLite). */
  databaseCpuMsPerPair: number | null;
}

/**
 * N clients doing pairs back to back for WARMUP_SECONDS + SECONDS; counts the pairs that ended inside the
 * measured window. Client i asks replica i mod R for the bundle and replica (i + 1) mod R validates it.
 */
async function measure(deployment: Deployment, clients: number): Promise<Run> {
  const replicas: Replica[] = deployment.replicas.map((r) => ({
    base: new URL(r.url),
    agent: new Agent({ keepAlive: true, maxSockets: clients, maxFreeSockets: clients }),
  }));
  // Each client is a harness with its own key, as harness processes are.
  const keys = Array.from({ length: clients }, () => publicKeyToJson(generateIdentity().publicKey));
  const connectPath = `/cloud/environment/${ENVIRONMENT}/connect`;
  const validatePath = `/cloud/environment/${ENVIRONMENT}/validate`;
  const started = performance.now();
  const windowStart = started + WARMUP_SECONDS * 1000;
  const windowEnd = windowStart + SECONDS * 1000;
  const latencies: number[] = [];
  // Registry CPU is read when the measured window opens (a timer) and once every client stopped; it is divided
  // by the pairs that ended between those two readings.
  const cpuNow = () => deployment.replicas.reduce((sum, r) => sum + r.cpuSeconds(), 0);
  const cpuStart = { at: Number.POSITIVE_INFINITY, seconds: 0 };
  let pairsSinceCpuStart = 0;
  // The PostgreSQL backends serving the replicas' pools at that moment, and the CPU they had used.
  let backends: Promise<Array<{ pid: number; seconds: number }>> = Promise.resolve([]);
  const cpuMark = setTimeout(() => {
    cpuStart.at = performance.now();
    cpuStart.seconds = cpuNow();
    const name = deployment.database;
    if (name !== null) {
      backends = backendPids(name).then((pids) =>
        pids.flatMap((pid) => {
          const seconds = cpuSecondsOf(pid);
          return seconds === null ? [] : [{ pid, seconds }];
        }),
      );
    }
  }, windowStart - started);
  // One wrong answer ends every client's loop: the run failed and its figures do not count.
  let failed = false;
  const client = async (i: number) => {
    const harnessKey = keys[i];
    const connectBody = JSON.stringify({ harness_public_key: harnessKey });
    const connectAt = replicas[i % replicas.length] as Replica;
    const validateAt = replicas[(i + 1) % replicas.length] as Replica;
    while (!failed && performance.now() < windowEnd) {
      const start = performance.now();
      const bundle = await post(connectAt, connectPath, deployment.harnessToken, connectBody);
      const answer = bundle.json as { harness_key_authorization?: string; executor_registration_id?: string };
      if (bundle.status !== 200 || answer.executor_registration_id !== deployment.registrationId) {
        throw new Error(`/connect: HTTP ${bundle.status} ${JSON.stringify(bundle.json).slice(0, 300)}`);
      }
      const validated = await post(
        validateAt,
        validatePath,
        deployment.executorToken,
        JSON.stringify({
          executor_registration_id: answer.executor_registration_id,
          harness_public_key: harnessKey,
          harness_key_authorization: answer.harness_key_authorization,
        }),
      );
      if (validated.status !== 200 || (validated.json as { valid?: unknown }).valid !== true) {
        throw new Error(`/validate: HTTP ${validated.status} ${JSON.stringify(validated.json)}`);
      }
      const end = performance.now();
      if (end >= windowStart && end < windowEnd) latencies.push(end - start);
      if (end >= cpuStart.at) pairsSinceCpuStart++;
    }
  };
  try {
    await Promise.all(
      Array.from({ length: clients }, (_, i) =>
        client(i).catch((err: unknown) => {
          failed = true;
          throw err;
        }),
      ),
    );
  } finally {
    clearTimeout(cpuMark);
    for (const r of replicas) r.agent.destroy();
  }
  const cpuSeconds = cpuNow() - cpuStart.seconds;
  // A backend that exited in between (the pool closes idle clients) is left out: a lower bound.
  const databaseCpuSeconds = (await backends).reduce(
    (sum, b) => sum + Math.max(0, (cpuSecondsOf(b.pid) ?? b.seconds) - b.seconds),
    0,
  );
  return {
    pairsPerSecond: latencies.length / SECONDS,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    pairs: latencies.length,
    cpuMsPerPair: (cpuSeconds * 1000) / pairsSinceCpuStart,
    databaseCpuMsPerPair: deployment.database === null ? null : (databaseCpuSeconds * 1000) / pairsSinceCpuStart,
  };
}

// Run ----------------------------------------------------------------------------------------------------

await runBench(async () => {
  const loadAtStart = loadavg();
  process.stderr.write(
    `registry bench: ${CLIENTS.join('/')} clients, ${WARMUP_SECONDS}+${SECONDS} s per run, median of ${REPEATS}; ` +
      `load average ${loadAtStart.map((x) => x.toFixed(1)).join(' ')}\n`,
  );
  const runs = new Map<string, Run[]>();
  const id = (setup: Setup, clients: number) => `${setup.name}\n${clients}`;
  // Every setup is deployed first and measured in turn, one run each per round, so that the shared machine's
  // changing load hits all of them alike (an idle deployment costs next to nothing).
  const deployments: Deployment[] = [];
  for (const setup of SETUPS) deployments.push(await deploy(setup));
  for (let r = 0; r < REPEATS; r++) {
    for (const clients of CLIENTS) {
      for (const [n, setup] of SETUPS.entries()) {
        const run = await measure(deployments[n] as Deployment, clients);
        const list = runs.get(id(setup, clients)) ?? [];
        list.push(run);
        runs.set(id(setup, clients), list);
        process.stderr.write(
          `  ${setup.name}, ${clients} clients: ${run.pairsPerSecond.toFixed(0)} pairs/s, p50 ${run.p50.toFixed(2)} ms, p99 ${run.p99.toFixed(2)} ms, ${run.cpuMsPerPair.toFixed(2)} registry CPU-ms/pair${run.databaseCpuMsPerPair === null ? '' : `, ${run.databaseCpuMsPerPair.toFixed(2)} PostgreSQL CPU-ms/pair`}\n`,
        );
      }
    }
  }
  for (const deployment of deployments) await deployment.close();
  const rows = SETUPS.flatMap((setup) =>
    CLIENTS.map((clients) => {
      const list = runs.get(id(setup, clients)) as Run[];
      return {
        setup: setup.name,
        clients,
        pairsPerSecond: median(list.map((x) => x.pairsPerSecond)),
        p50: median(list.map((x) => x.p50)),
        p99: median(list.map((x) => x.p99)),
        cpuMsPerPair: median(list.map((x) => x.cpuMsPerPair)),
        databaseCpuMsPerPair: setup.engine === 'postgres' ? median(list.map((x) => x.databaseCpuMsPerPair ?? 0)) : null,
        runs: list,
      };
    }),
  );
  const sqlite = (clients: number) =>
    rows.find((row) => row.clients === clients && row.setup === ALL_SETUPS[0]?.name)?.pairsPerSecond;
  const vsSqlite = (row: { clients: number; pairsPerSecond: number }) => {
    const base = sqlite(row.clients);
    return base === undefined ? '' : `${(row.pairsPerSecond / base).toFixed(2)}×`;
  };
  console.log(
    [
      '| registry | clients | pairs/s | vs SQLite | pair p50 (ms) | pair p99 (ms) | CPU per pair (ms): registry | PostgreSQL backends |',
      '|---|---:|---:|---:|---:|---:|---:|---:|',
      ...rows.map(
        (row) =>
          `| ${row.setup} | ${row.clients} | ${row.pairsPerSecond.toFixed(0)} | ${vsSqlite(row)} | ${row.p50.toFixed(2)} | ${row.p99.toFixed(2)} | ${row.cpuMsPerPair.toFixed(2)} | ${row.databaseCpuMsPerPair === null ? '' : row.databaseCpuMsPerPair.toFixed(2)} |`,
      ),
    ].join('\n'),
  );
  writeResults('registry-replicas-latest.json', {
    ...machine(loadAtStart),
    seconds: SECONDS,
    warmupSeconds: WARMUP_SECONDS,
    rows,
  });
});
