/**
 * The load row of path.ts, in a process of its own: `connections` SDK connections to one environment through
 * the registry and relay (Environment.connectRendezvous), each running `jobs.length / connections` processes
 * at once, every process's stdout hashed as it arrives and compared with the sha256 the plan gives for it. Reads its plan (JSON) from the file named by argv[2],
 * prints its findings (JSON) on stdout. The received bytes of the first few processes whose output is wrong
 * are kept in `keepDir` for the parent to locate what went wrong.
 *
 * The SDK is loaded from its build (@tether/client's dist: this script runs without the tether-source
 * condition), the same code as the executor and harness CLI
 * run, not from the workspace sources that the rest of the bench loads.
 */
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Environment } from '@tether/client';

export interface LoadPlan {
  registryUrl: string;
  apiKey: string;
  environmentId: string;
  connections: number;
  /** One per process, connection by connection (`jobs.length / connections` each). */
  jobs: Array<{ argv: string[]; bytes: number; sha256: string }>;
  keepDir: string;
}

export interface LoadFailure {
  connection: number;
  process: number;
  exitCode: number | null;
  bytes: number;
  expectedBytes: number;
  sha256: string;
  error?: string;
  /** Where the received bytes were kept (first few failures only). */
  kept?: string;
}

export interface LoadResult {
  connectSeconds: number;
  seconds: number;
  bytes: number;
  processes: number;
  failures: LoadFailure[];
  /** This process's CPU (user + system) over the whole run, connections included. */
  cpuSeconds: number;
}

const KEEP = 5;

const plan = JSON.parse(readFileSync(process.argv[2] as string, 'utf8')) as LoadPlan;
const perConnection = plan.jobs.length / plan.connections;
const connectStarted = performance.now();
const environments = await Promise.all(
  Array.from({ length: plan.connections }, () =>
    Environment.connectRendezvous({
      registryUrl: plan.registryUrl,
      apiKey: plan.apiKey,
      environmentId: plan.environmentId,
      clientName: 'tether-bench-load',
    }),
  ),
);
const connectSeconds = (performance.now() - connectStarted) / 1000;
const failures: LoadFailure[] = [];
let bytes = 0;

async function runJob(env: Environment, connection: number, index: number): Promise<void> {
  const job = plan.jobs[connection * perConnection + index] as LoadPlan['jobs'][number];
  const hash = createHash('sha256');
  const chunks: Buffer[] = [];
  let received = 0;
  let exitCode: number | null = null;
  let error: string | undefined;
  try {
    const handle = await env.spawn(job.argv);
    for await (const event of handle) {
      if (event.kind !== 'output' || event.stream !== 'stdout') continue;
      hash.update(event.chunk);
      received += event.chunk.byteLength;
      if (failures.length < KEEP) chunks.push(Buffer.from(event.chunk));
    }
    exitCode = (await handle.completion).exitCode;
  } catch (err) {
    error = (err as Error).message ?? String(err);
  }
  bytes += received;
  const sha256 = hash.digest('hex');
  if (exitCode === 0 && received === job.bytes && sha256 === job.sha256) return;
  const failure: LoadFailure = {
    connection,
    process: index,
    exitCode,
    bytes: received,
    expectedBytes: job.bytes,
    sha256,
    ...(error ? { error } : {}),
  };
  if (failures.length < KEEP && chunks.length > 0) {
    failure.kept = join(plan.keepDir, `c${connection}-p${index}.out`);
    writeFileSync(failure.kept, Buffer.concat(chunks));
  }
  failures.push(failure);
}

const started = performance.now();
await Promise.all(
  environments.map((env, connection) =>
    Promise.all(Array.from({ length: perConnection }, (_, index) => runJob(env, connection, index))),
  ),
);
const seconds = (performance.now() - started) / 1000;
await Promise.all(environments.map((env) => env.close()));
const cpu = process.cpuUsage();
const result: LoadResult = {
  connectSeconds,
  seconds,
  bytes,
  processes: plan.jobs.length,
  failures,
  cpuSeconds: (cpu.user + cpu.system) / 1e6,
};
process.stdout.write(`${JSON.stringify(result)}\n`);
