/**
 * What the whole-command benchmarks (cp.ts, path.ts) share besides sshd: the harness CLI as a user runs it
 * against a product stack, timing of whole commands, medians, and the results file.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { repoRoot, type Stack, waitUntil } from '@tether/test-kit';

export const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] as number;

/** The harness CLI's built entry point (the bundle). */
export function harnessMain(): string {
  return join(repoRoot(), 'apps', 'harness', 'dist', 'main.js');
}

/** What a harness user has in their environment to reach `environmentId` of `stack`. */
export function harnessEnv(stack: Stack, environmentId?: string): NodeJS.ProcessEnv {
  return {
    ...process.env,
    TETHER_HARNESS_REGISTRY: stack.registryUrl,
    TETHER_HARNESS_API_KEY: stack.keys.harness,
    ...(environmentId ? { TETHER_HARNESS_ENVIRONMENT_ID: environmentId } : {}),
  };
}

/**
 * A directory holding `harness` (a link to apps/harness/bin/harness.js, as a global install of the package
 * puts it), for the front of PATH, so commands read as a user types them.
 */
export function harnessBinDir(dir: string): string {
  const bin = join(dir, 'bin');
  mkdirSync(bin, { recursive: true });
  symlinkSync(join(repoRoot(), 'apps', 'harness', 'bin', 'harness.js'), join(bin, 'harness'));
  return bin;
}

/** Runs a command to completion; returns its wall time in seconds (throws on failure). */
export function timed(command: string, args: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(command, args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => {
      stderr += d;
    });
    child.once('error', reject);
    child.once('exit', (code) => {
      if (code === 0) resolve((performance.now() - started) / 1000);
      else reject(new Error(`${command} ${args.join(' ')} exited ${code}: ${stderr}`));
    });
  });
}

export interface ShellRun {
  seconds: number;
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  pid: number;
  /** Killed (with its whole process group) after `timeoutMs`. */
  timedOut: boolean;
}

export interface ShellOptions {
  /** Gets the shell's pid once spawned (e.g. to sample its process tree). */
  onSpawn?: (pid: number) => void;
  /** Default 10 minutes. */
  timeoutMs?: number;
}

/**
 * Runs `command` with `sh -c` (stdin from /dev/null unless the command redirects it) and times it from spawn
 * to exit. stdout and stderr are collected (keep them small: redirect bulk output in the command). The shell
 * leads a process group of its own, which is killed whole if the command outlives `timeoutMs`.
 */
export function shell(command: string, env: NodeJS.ProcessEnv, options: ShellOptions = {}): Promise<ShellRun> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn('/bin/sh', ['-c', command], { env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => {
      if (stdout.length < 64 * 1024) stdout += d;
    });
    child.stderr.on('data', (d: Buffer) => {
      if (stderr.length < 64 * 1024) stderr += d;
    });
    child.once('error', reject);
    if (child.pid) options.onSpawn?.(child.pid);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-(child.pid as number), 'SIGKILL');
      } catch {
        // already gone
      }
    }, options.timeoutMs ?? 600_000);
    // Timed to the shell's exit; its output is complete once the pipes close.
    let seconds = Number.NaN;
    child.once('exit', () => {
      seconds = (performance.now() - started) / 1000;
      clearTimeout(timer);
    });
    child.once('close', (code, signal) =>
      resolve({ seconds, code, signal, stdout, stderr, pid: child.pid ?? -1, timedOut }),
    );
  });
}

/** Writes `bench/results/<name>` (JSON), where every bench section leaves its figures. */
/** Where figures were taken: the date, Node's version, the cores, and the load average at `loadAtStart` and now. */
export function machine(loadAtStart: number[]) {
  return {
    date: new Date().toISOString(),
    node: process.version,
    cpus: cpus().length,
    loadAverage: { atStart: loadAtStart, atEnd: loadavg() },
  };
}

export function writeResults(name: string, data: unknown): string {
  const out = join(repoRoot(), 'bench', 'results');
  mkdirSync(out, { recursive: true });
  const file = join(out, name);
  writeFileSync(file, `${JSON.stringify(data, null, 2)}\n`);
  return file;
}

/** A harness connection master for a bench's tether side (`startHarnessMaster`). */
export interface HarnessMaster {
  /** The master's pid. */
  readonly pid: number;
  /**
   * Waits (outside any timed run) until the master's warm process has its command's channel set up, and
   * answers its pid. A command takes the warm process waiting, and the next one starts once that command is
   * done: its load and set-up (registry, relay, handshake) would otherwise run during the next timed command,
   * of either side, as they would not for a person at a prompt.
   */
  settle(): Promise<number>;
  stop(): Promise<void>;
}

/**
 * `harness master start --persist 0` for `env`'s environment (`harness` on its PATH, as both benches put it):
 * the counterpart of the ssh side's ControlMaster (started beforehand and kept, `ControlPersist`).
 */
export async function startHarnessMaster(env: NodeJS.ProcessEnv): Promise<HarnessMaster> {
  const started = await shell('harness master start --persist 0', env);
  if (started.code !== 0) throw new Error(`harness master start failed: ${started.stderr}`);
  const status = async () => (await shell('harness master status', env)).stdout;
  const pid = Number(/master pid (\d+)/.exec(await status())?.[1]);
  if (!Number.isInteger(pid)) throw new Error('harness master status named no pid');
  return {
    pid,
    settle: async () => {
      let warm = Number.NaN;
      await waitUntil(
        async () => {
          warm = Number(/warm process pid (\d+) \(channel ready\)/.exec(await status())?.[1]);
          return Number.isInteger(warm);
        },
        'a warm process of the harness master with its channel set up',
        30_000,
        50,
      );
      return warm;
    },
    stop: async () => {
      await shell('harness master stop', env);
    },
  };
}
