// Benchmark (not a test): /connect + /validate pairs per second and p99 latency against a `registry serve`
// subprocess, on SQLite and on PostgreSQL, with autocannon (50 connections). Usage: pnpm bench [seconds]
// Besides throughput, which depends on whatever else the machine runs, it reports CPU time per pair of the registry
// process (all its threads), of this load generator, and for PostgreSQL of the local server's processes, plus the
// 1-minute load average at the start. BENCH_RUNS=N runs each engine N times and adds a median row. (No fixed-rate
// mode: autocannon's rate limit refills once a second, so every connection bursts at the top of each second.)
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateIdentity, publicKeyToJson } from '@tether/noise';
import autocannon from 'autocannon';
import pg from 'pg';
import { openStore } from '../src/store/index.js';
import { generateToken, hashToken } from '../src/tokens.js';

const SECONDS = Number(process.argv[2] ?? 10);
const PG_URL = process.env.TETHER_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const APP_DIR = join(import.meta.dirname, '..');
/** BENCH_ENGINES=sqlite (or postgres) runs one engine; BENCH_CPU_PROF=DIR writes the registry's V8 CPU profile. */
const ENGINES = (process.env.BENCH_ENGINES ?? 'sqlite,postgres').split(',') as Array<'sqlite' | 'postgres'>;
const PROFILE_DIR = process.env.BENCH_CPU_PROF;
const RUNS = Number(process.env.BENCH_RUNS ?? 1);

/** CPU time (user + system, ms) a process has used so far, from /proc (Linux); NaN elsewhere. */
function processCpuMs(pid: number | string, command?: string): number {
  try {
    // Fields after the parenthesised command name: utime and stime are the 12th and 13th.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    if (command !== undefined && !stat.includes(`(${command})`)) return 0;
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS;
  } catch {
    return command === undefined ? Number.NaN : 0;
  }
}

/** CPU time of every local `postgres` process (server and backends); backends that exit meanwhile are missed. */
function postgresCpuMs(): number {
  let total = 0;
  for (const pid of readdirSync('/proc')) if (/^\d+$/.test(pid)) total += processCpuMs(pid, 'postgres');
  return total;
}
const CLOCK_TICKS = 100; // USER_HZ, 100 on every Linux architecture Node supports

async function bench(engine: 'sqlite' | 'postgres') {
  const dir = mkdtempSync(join(tmpdir(), 'registry-bench-'));
  const schema = `registry_bench_${randomBytes(4).toString('hex')}`;
  const database =
    engine === 'sqlite' ? `sqlite:${join(dir, 'r.db')}` : `${PG_URL}?options=-c%20search_path%3D${schema}`;
  const store = await openStore(engine === 'sqlite' ? database : PG_URL, { schema });
  const executor = generateToken();
  const harness = generateToken();
  for (const [id, token, role] of [
    ['e', executor, 'executor'],
    ['h', harness, 'harness'],
  ] as const) {
    await store.createApiKey({ id, tokenHash: hashToken(token), role, environments: '*', label: id, createdAt: 0 });
  }
  await store.close();

  const child = spawn(
    process.execPath,
    [
      ...(PROFILE_DIR ? ['--cpu-prof', '--cpu-prof-dir', PROFILE_DIR] : []),
      '--conditions=tether-source',
      '--import',
      'tsx',
      'src/main.ts',
      'serve',
      '--listen',
      '127.0.0.1:0',
    ],
    {
      cwd: APP_DIR,
      env: {
        ...process.env,
        TETHER_REGISTRY_DATABASE: database,
        TETHER_REGISTRY_DATA_DIR: dir,
        TETHER_REGISTRY_LOG_LEVEL: 'warn',
        // A throughput benchmark from one key and one address: the rate limits are lifted (their cost stays).
        TETHER_REGISTRY_RATE_LIMIT_PER_KEY: '1000000000',
        TETHER_REGISTRY_RATE_LIMIT_UNAUTHENTICATED: '1000000000',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout.once('data', (d: Buffer) => resolve(d.toString().trim()));
    child.once('exit', (code) => reject(new Error(`registry exited ${code}`)));
  });
  const headers = (token: string) => ({ authorization: `Bearer ${token}`, 'content-type': 'application/json' });
  const registered = await fetch(`${url}/cloud/environment/bench-1/register`, {
    method: 'POST',
    headers: headers(executor),
    body: JSON.stringify({
      security_profile: 'noise_hybrid_ik_v1',
      executor_public_key: publicKeyToJson(generateIdentity().publicKey),
    }),
  });
  const registrationId = ((await registered.json()) as { executor_registration_id: string }).executor_registration_id;
  const harnessKey = publicKeyToJson(generateIdentity().publicKey);

  let invalid = 0;
  const loadAverage = Number((loadavg()[0] as number).toFixed(1));
  const registryCpuBefore = processCpuMs(child.pid as number);
  const postgresCpuBefore = engine === 'postgres' ? postgresCpuMs() : 0;
  const clientCpuBefore = process.cpuUsage();
  const result = await autocannon({
    url,
    connections: 50,
    duration: SECONDS,
    requests: [
      {
        method: 'POST',
        path: '/cloud/environment/bench-1/connect',
        headers: headers(harness),
        body: JSON.stringify({ harness_public_key: harnessKey }),
        onResponse: (_status, body, context) => {
          context.authorization = (JSON.parse(body) as { harness_key_authorization: string }).harness_key_authorization;
        },
      },
      {
        method: 'POST',
        path: '/cloud/environment/bench-1/validate',
        headers: headers(executor),
        setupRequest: (request, context) => ({
          ...request,
          body: JSON.stringify({
            executor_registration_id: registrationId,
            harness_public_key: harnessKey,
            harness_key_authorization: context.authorization,
          }),
        }),
        onResponse: (_status, body) => {
          if (!(JSON.parse(body) as { valid: boolean }).valid) invalid++;
        },
      },
    ],
  });
  const registryCpu = processCpuMs(child.pid as number) - registryCpuBefore;
  const postgresCpu = engine === 'postgres' ? postgresCpuMs() - postgresCpuBefore : Number.NaN;
  const clientCpuUsage = process.cpuUsage(clientCpuBefore);
  const clientCpu = (clientCpuUsage.user + clientCpuUsage.system) / 1000;
  child.kill('SIGTERM');
  await new Promise((resolve) => child.once('exit', resolve));
  rmSync(dir, { recursive: true, force: true });
  if (engine === 'postgres') {
    const client = new pg.Client({ connectionString: PG_URL });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await client.end();
  }
  const pairs = result.requests.total / 2;
  return {
    engine,
    pairsPerSecond: Math.round(result.requests.average / 2),
    p99Ms: result.latency.p99,
    // CPU per pair: what the registry itself costs, separately from the load generator sharing the machine.
    registryCpuMsPerPair: Number((registryCpu / pairs).toFixed(3)),
    clientCpuMsPerPair: Number((clientCpu / pairs).toFixed(3)),
    postgresCpuMsPerPair: Number((postgresCpu / pairs).toFixed(3)),
    loadAverage,
    requests: result.requests.total,
    non2xx: result.non2xx,
    errors: result.errors,
    invalidValidations: invalid,
  };
}

type Row = Awaited<ReturnType<typeof bench>>;
const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};
const rows: Array<Row | Record<string, string | number>> = [];
for (const engine of ENGINES) {
  const runs: Row[] = [];
  for (let i = 0; i < RUNS; i++) runs.push(await bench(engine));
  rows.push(...runs);
  if (RUNS > 1) {
    const row: Record<string, string | number> = { engine: `${engine} median` };
    for (const field of Object.keys(runs[0] as Row) as Array<keyof Row>) {
      if (field !== 'engine') row[field] = Number(median(runs.map((r) => r[field] as number)).toFixed(3));
    }
    rows.push(row);
  }
}
console.table(rows);
