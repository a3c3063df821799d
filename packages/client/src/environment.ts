import { randomUUID } from 'node:crypto';
import type { ProcessBackend, SignalName } from './backend.js';
import type { ExecServerClientOptions } from './client-options.js';
import {
  type AttachedProcess,
  type AttachOptions,
  attachProcess,
  type CommandOptions,
  killProcess,
  listProcesses,
  type ProcessInfo,
  type SpawnDetachedOptions,
  spawnDetached,
} from './detached.js';
import { TetherError } from './errors.js';
import { ExecServerClient } from './exec-client.js';
import type { EnvironmentFs } from './fs.js';
import { LocalBackend } from './local-backend.js';
import { LocalFs } from './local-fs.js';
import { ProcessHandle, type ProcessHandleOptions } from './process.js';
import { RemoteFs } from './remote-fs.js';
import type { RendezvousOptions } from './rendezvous-dialer.js';
import { type ConnectTcpOptions, connectLocalTcp, type TcpDuplex } from './tcp.js';

export interface SpawnOptions extends CommandOptions, ProcessHandleOptions {
  /** Run confined (sandboxProfile; the executor must advertise `processSandbox`). */
  sandbox?: Record<string, unknown>;
}

/**
 * Where processes run and files live: this machine (`Environment.local()`) or a remote executor
 * (`Environment.connect…`). Both offer the same `spawn`/`exec` and `fs`.
 */
export class Environment {
  private readonly handles = new Set<ProcessHandle>();
  private readonly attachments = new Set<AttachedProcess>();
  private closed = false;

  private constructor(
    private readonly backend: ProcessBackend,
    readonly fs: EnvironmentFs,
    private readonly defaultCwd: string,
    private onClose: () => Promise<void>,
    /** The executor client when remote (for raw calls), else null. */
    readonly client: ExecServerClient | null,
  ) {}

  static local(): Environment {
    const backend = new LocalBackend();
    return new Environment(backend, new LocalFs(), process.cwd(), () => backend.close(), null);
  }

  /** A remote executor reached through the registry and relay (end-to-end encrypted). */
  static async connectRendezvous(
    options: RendezvousOptions & Omit<ExecServerClientOptions, 'dial'>,
  ): Promise<Environment> {
    return Environment.remote(await ExecServerClient.connectRendezvous(options));
  }

  /** An executor listening on a WebSocket (`executor --listen ws://…`). */
  static async connectWebSocket(
    url: string,
    options: Omit<ExecServerClientOptions, 'dial'> = {},
  ): Promise<Environment> {
    return Environment.remote(await ExecServerClient.connectWebSocket(url, options));
  }

  /** An executor this environment starts and owns, over its stdio (e.g. `['executor', '--listen', 'stdio']`). */
  static async connectStdio(
    command: string[],
    options: Parameters<typeof ExecServerClient.connectStdio>[1] = {},
  ): Promise<Environment> {
    const client = await ExecServerClient.connectStdio(command, options);
    const env = Environment.remote(client);
    const close = env.onClose;
    env.onClose = async () => {
      await close();
      await client.whenChildExited();
    };
    return env;
  }

  static remote(client: ExecServerClient): Environment {
    // Read per call: a resumed connection may advertise differently.
    const capabilities = () => client.capabilities;
    const fs = new RemoteFs({ call: (method, params, options) => client.call(method, params, options), capabilities });
    return new Environment(client, fs, '/', async () => client.close(), client);
  }

  /** Starts a process; its events, stdin and signals are on the handle. */
  async spawn(argv: string[], options: SpawnOptions = {}): Promise<ProcessHandle> {
    if (this.closed) throw new TetherError('closed', 'the environment is closed');
    if (argv.length === 0) throw new TetherError('invalid_argument', 'argv must not be empty');
    const processId = options.processId ?? randomUUID();
    // Subscribe before starting: the first events can arrive before the start is answered.
    const handle = new ProcessHandle(processId, this.backend, options);
    this.handles.add(handle);
    void handle.completion.then(
      () => this.handles.delete(handle),
      () => this.handles.delete(handle),
    );
    try {
      const started = await this.backend.start({
        processId,
        argv,
        cwd: options.cwd ?? this.defaultCwd,
        env: options.env ?? {},
        inheritEnv: options.inheritEnv ?? true,
        tty: options.tty ?? false,
        pipeStdin: options.stdin ?? false,
        arg0: options.arg0 ?? null,
        size: options.size ?? null,
        flowWindowBytes: handle.flowWindowBytes,
        sandbox: options.sandbox ?? null,
      });
      handle.started(started);
    } catch (err) {
      handle.startFailed(err as Error);
      throw err;
    }
    return handle;
  }

  /**
   * A TCP connection to `host:port` as seen from the environment (ssh -L's one connection): remote, it is
   * carried inside the encrypted session (capability `tcpForward`; a TcpConnectError says why one was
   * refused); local, it is a plain socket. A Duplex with backpressure; `end()` half-closes. A remote one's
   * chunks may sit in pooled buffers of the connection: `giveBack(chunk)` once written out.
   */
  async connectTcp(host: string, port: number, options: ConnectTcpOptions = {}): Promise<TcpDuplex> {
    if (this.closed) throw new TetherError('closed', 'the environment is closed');
    return this.client ? this.client.tcp.connect(host, port, options) : connectLocalTcp(host, port);
  }

  /** Runs to completion; resolves with the exit code and the collected output. */
  async exec(argv: string[], options: SpawnOptions = {}) {
    const handle = await this.spawn(argv, options);
    return handle.collect();
  }

  // Detached processes (capability `processDetach`; detached.ts) ---------------------------------------

  /** Starts a process that belongs to the executor and outlives this environment; resolves with its id. */
  async spawnDetached(argv: string[], options: SpawnDetachedOptions = {}): Promise<{ processId: string }> {
    if (this.closed) throw new TetherError('closed', 'the environment is closed');
    return spawnDetached(this.client, argv, options);
  }

  /** This session's processes and the executor's detached ones. */
  async listProcesses(): Promise<ProcessInfo[]> {
    if (this.closed) throw new TetherError('closed', 'the environment is closed');
    return listProcesses(this.client);
  }

  /** Follows a detached process (replay, then live, to its end); several environments may attach at once. */
  async attach(processId: string, options: AttachOptions = {}): Promise<AttachedProcess> {
    if (this.closed) throw new TetherError('closed', 'the environment is closed');
    const attached = await attachProcess(this.client, processId, options);
    this.attachments.add(attached);
    const forget = () => this.attachments.delete(attached);
    void attached.completion.then(forget, forget);
    return attached;
  }

  /** Signals a detached process (default `terminate`, SIGTERM); an unknown or ended one is an error. */
  async kill(processId: string, signal: SignalName = 'terminate'): Promise<void> {
    if (this.closed) throw new TetherError('closed', 'the environment is closed');
    return killProcess(this.client, processId, signal);
  }

  /** Stops following every process; a local environment also kills them (detached processes go on). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const handle of this.handles) handle.dispose();
    for (const attached of this.attachments) attached.dispose();
    await this.onClose();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
