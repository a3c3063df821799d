/**
 * The master's side of warm processes (src/warm.ts): one harness process at a time, the CLI bundle loaded,
 * waiting on the master's `.warm.sock` for a command to hand itself over. When one is taken (it says so on its
 * fd 3) it is the command's and is left to finish; the next is started once it has (started beside it, its load
 * would take CPU from the command). A waiting warm process ends with its master: it waits on fd 3, which hangs
 * up when the master closes it or dies.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import type { Duplex, Readable } from 'node:stream';
import { WARM_ARG, WARM_SOCKET_ENV } from '../warm.js';

/** Warm processes that end without serving a command, in a row, after which the master starts no more. */
const MAX_FAILURES = 3;
const RETRY_MS = 1_000;

export interface WarmKeeperOptions {
  /** Where the warm process listens (`MasterPaths.warm`). */
  socketPath: string;
  log: (line: string) => void;
  /** The program and arguments before WARM_ARG (default: this process's Node, flags and entry script). */
  command?: { file: string; args: string[] };
  /**
   * What each warm process is told first on its fd 3, one JSON value (`WarmChannelSpec`: where to set up the
   * channel of the command it will run); asked for at each start, as the master's pin may be new.
   */
  spec?: () => unknown;
}

export class WarmKeeper {
  private child: ChildProcess | null = null;
  private closed = false;
  private failures = 0;
  private retryTimer: NodeJS.Timeout | null = null;
  private ready = false;

  constructor(private readonly options: WarmKeeperOptions) {}

  /** Whether the waiting warm process has its command's channel set up (it says `ready` / `unready` on fd 3). */
  get channelReady(): boolean {
    return this.child !== null && this.ready;
  }

  /** The waiting warm process's pid, null when none waits. */
  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  start(): void {
    if (this.closed || this.child !== null) return;
    const command = this.options.command ?? {
      file: process.execPath,
      args: [...process.execArgv, process.argv[1] ?? ''],
    };
    // Its stdout and stderr are the master's (its log) until a command hands over its own.
    const child = spawn(command.file, [...command.args, WARM_ARG], {
      cwd: '/',
      env: { ...process.env, [WARM_SOCKET_ENV]: this.options.socketPath },
      stdio: ['ignore', 'inherit', 'inherit', 'pipe'],
    });
    this.child = child;
    const control = child.stdio[3] as Duplex;
    // It holds the API key: a pipe of this process's, never an argument or a variable.
    if (this.options.spec) control.write(`${JSON.stringify(this.options.spec())}\n`);
    let taken = false;
    control.setEncoding('utf8');
    this.ready = false;
    control.on('data', (text: string) => {
      if (taken) return;
      // Lines are a word each; the last state word in this chunk is the one that holds.
      const states = text.match(/\b(?:ready|unready)\b/g);
      if (states && this.child === child) this.ready = states[states.length - 1] === 'ready';
      if (!text.includes('taken')) return;
      taken = true;
      this.failures = 0;
      control.destroy();
      child.unref();
      if (this.child === child) this.child = null;
      // The next one once this command is done: started beside it, its load (about 60 ms of CPU) would
      // take a core from the command, the master, the relay and the executor.
      child.once('exit', () => this.start());
    });
    control.on('error', () => undefined);
    child.on('error', (err) => this.options.log(`warm process: ${err.message}`));
    child.once('exit', (code, signal) => {
      if (taken) return;
      if (this.child === child) this.child = null;
      if (this.closed) return;
      this.options.log(`warm process ${child.pid} ended (${signal ?? `exit ${code}`}) before serving a command`);
      if (++this.failures >= MAX_FAILURES) {
        this.options.log('warm processes keep failing: commands load the harness themselves');
        return;
      }
      this.retryTimer = setTimeout(() => {
        this.retryTimer = null;
        this.start();
      }, RETRY_MS);
    });
  }

  /** Ends the waiting warm process (its fd 3 hangs up: it removes its socket and exits); a taken one runs on. */
  close(): void {
    this.closed = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    const child = this.child;
    this.child = null;
    (child?.stdio[3] as Readable | undefined)?.destroy();
  }
}
