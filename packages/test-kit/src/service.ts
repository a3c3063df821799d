import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { type PeerExit, peerMarkerEnv, repoRoot } from './peer.js';

/**
 * One registry or relay process of a stack (stack.ts), from the built bin, restartable on the port it had (so
 * URLs handed out before stay valid). Every one carries the test-kit peer marker, so a run's leak check finds any
 * that outlives it.
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

const stopCurrent = new WeakMap<Service, () => Promise<PeerExit>>();

/** Stops whatever process of `service` is current (SIGTERM, then SIGKILL after a grace period). */
export function stopService(service: Service): Promise<PeerExit> | undefined {
  return stopCurrent.get(service)?.();
}
