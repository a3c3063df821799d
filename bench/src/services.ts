/**
 * What the multi-process benches share: a registry or relay bin started as its own process (the URL it prints,
 * its RSS and CPU from /proc), a fresh PostgreSQL database, and one list of things to end — processes,
 * databases, directories — that runs on success, on a thrown error and on SIGINT/SIGTERM alike.
 */

import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { postgres, repoRoot, runToEnd } from '@tether/test-kit';
import pg from 'pg';

// Cleanup ------------------------------------------------------------------------------------------------

const cleanups: Array<() => Promise<void>> = [];
let signalled = false;

/** Registers `end` to run at cleanup (last registered, first run); returns a function that runs it now. */
export function onCleanup(end: () => Promise<void>): () => Promise<void> {
  let done: Promise<void> | null = null;
  const once = () => {
    done ??= end();
    return done;
  };
  cleanups.push(once);
  return async () => {
    const at = cleanups.indexOf(once);
    if (at >= 0) cleanups.splice(at, 1);
    await once();
  };
}

/** Runs every registered cleanup, newest first; a failing one is reported and the rest still run. */
export async function cleanupAll(): Promise<void> {
  while (cleanups.length > 0) {
    const end = cleanups.pop() as () => Promise<void>;
    try {
      await end();
    } catch (err) {
      process.stderr.write(`bench: cleanup failed: ${(err as Error).message}\n`);
    }
  }
}

/**
 * Runs a bench's `main`, then its cleanups, whether `main` returned, threw or the bench got SIGINT/SIGTERM;
 * exits 0 only when `main` returned.
 */
export async function runBench(main: () => Promise<void>): Promise<never> {
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      if (signalled) return;
      signalled = true;
      process.stderr.write(`bench: ${signal}, ending what it started…\n`);
      void cleanupAll().finally(() => process.exit(130));
    });
  }
  let code = 0;
  try {
    await main();
  } catch (err) {
    process.stderr.write(`bench failed: ${(err as Error).stack ?? err}\n`);
    code = 1;
  }
  await cleanupAll();
  process.exit(code);
}

// Service processes --------------------------------------------------------------------------------------

export interface ServiceProcess {
  /** What it printed first on stdout: `http://…` (registry) or `ws://…` (relay). */
  readonly url: string;
  readonly pid: number;
  rssKiB(): number;
  /** CPU seconds (user + system) the process used so far. */
  cpuSeconds(): number;
  /** Its stderr so far (capped), for error messages. */
  stderr(): string;
  /** SIGTERM, SIGKILL after 5 s; resolves once it exited. */
  close(): Promise<void>;
}

const STDERR_CAP = 64 * 1024;

/**
 * Starts `node apps/<app>/dist/main.js ARGS` (the built bin, as a user runs it) and resolves with the URL it prints.
 * Registered for cleanup at once, so a start that fails half-way leaves nothing running.
 */
export async function startService(
  app: 'registry' | 'relay',
  args: string[],
  options: { nodeArgs?: string[] } = {},
): Promise<ServiceProcess> {
  const child: ChildProcess = spawn(
    process.execPath,
    [...(options.nodeArgs ?? []), join(repoRoot(), 'apps', app, 'dist', 'main.js'), ...args],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    if (stderr.length < STDERR_CAP) stderr += d;
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const close = onCleanup(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  });
  let stdout = '';
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout?.on('data', (d: Buffer) => {
      stdout += d;
      if (stdout.includes('\n')) resolve((stdout.split('\n')[0] as string).trim());
    });
    child.once('error', reject);
    void exited.then(() =>
      reject(new Error(`${app} ${args[0]} exited (${child.signalCode ?? child.exitCode}): ${stderr.slice(-2000)}`)),
    );
  });
  // Keep draining stdout so the child never blocks on a full pipe.
  child.stdout?.resume();
  const pid = child.pid as number;
  return {
    url,
    pid,
    rssKiB: () => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]),
    cpuSeconds: () => cpuSecondsOf(pid) ?? Number.NaN,
    stderr: () => stderr,
    close,
  };
}

/** CPU seconds (user + system) process `pid` used so far, or null once it is gone. */
export function cpuSecondsOf(pid: number): number | null {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** Runs a bin to completion (`registry keys create …`); resolves with its stdout, rejects on a non-zero exit. */
export async function runBin(app: 'registry' | 'relay', args: string[]): Promise<string> {
  const { code, stdout, stderr } = await runToEnd(process.execPath, [
    join(repoRoot(), 'apps', app, 'dist', 'main.js'),
    ...args,
  ]);
  if (code !== 0) throw new Error(`${app} ${args.slice(0, 2).join(' ')} exited ${code}: ${stderr.slice(-2000)}`);
  return stdout;
}

// PostgreSQL ---------------------------------------------------------------------------------------------

/** The server the benches use (trust auth); BENCH_POSTGRES_URL overrides it (any database on that server). */
export const POSTGRES_ADMIN_URL = process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

/**
 * CREATE DATABASE bench_<random> on the bench's PostgreSQL server; resolves with its URL. Dropped at cleanup
 * (WITH (FORCE), so connections a killed process left behind do not keep it).
 */
export async function createPostgresDatabase(
  settings: Record<string, string> = {},
): Promise<{ url: string; name: string; drop(): Promise<void> }> {
  const name = `bench_${randomBytes(6).toString('hex')}`;
  const admin = (sql: string) => postgres(POSTGRES_ADMIN_URL, sql);
  await admin(`CREATE DATABASE ${name}`);
  const drop = onCleanup(() => admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
  // Defaults for every session opened on it later (e.g. synchronous_commit); names and values are the bench's own.
  for (const [setting, value] of Object.entries(settings)) {
    if (!/^[a-z_]+$/.test(setting) || !/^[a-z0-9_]+$/.test(value)) throw new Error(`bad setting ${setting}=${value}`);
    await admin(`ALTER DATABASE ${name} SET ${setting} = ${value}`);
  }
  const url = new URL(POSTGRES_ADMIN_URL);
  url.pathname = `/${name}`;
  return { url: url.toString(), name, drop };
}

/** The server processes (backends) serving connections to database `name` now. */
export async function backendPids(name: string): Promise<number[]> {
  const client = new pg.Client({ connectionString: POSTGRES_ADMIN_URL });
  await client.connect();
  try {
    const { rows } = await client.query<{ pid: number }>(
      'SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()',
      [name],
    );
    return rows.map((row) => row.pid);
  } finally {
    await client.end();
  }
}

// Statistics ---------------------------------------------------------------------------------------------

export const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
};

export const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
};
