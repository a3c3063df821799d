import type { ProcessShareResult } from '@tether/exec-protocol';
import type { ProcessBackend, SignalName } from './backend.js';
import type { ExecServerClientOptions } from './client-options.js';
import {
  type AttachedProcess,
  type AttachOptions,
  attachProcess,
  type CommandOptions,
  commandStart,
  killProcess,
  listProcesses,
  type ProcessInfo,
  type ShareOptions,
  type SpawnDetachedOptions,
  shareProcess,
  spawnDetached,
  unshareProcess,
} from './detached.js';
import { TetherError } from './errors.js';
import { ExecServerClient } from './exec-client.js';
import type { PortableFs } from './fs.js';
import type { NetworkPolicy } from './network.js';
import { ProcessHandle, type ProcessHandleOptions } from './process.js';
import { type FsCaller, RemoteFs } from './remote-fs.js';
import type { RendezvousOptions } from './rendezvous-dialer.js';

export interface SpawnOptions extends CommandOptions, ProcessHandleOptions {
  /** Run confined (sandboxProfile; the executor must advertise `processSandbox`). */
  sandbox?: Record<string, unknown>;
  /** Confine the network to named hosts (network.ts; the executor must advertise `networkProxyLaunch`). */
  network?: NetworkPolicy;
}

/**
 * Where processes run and files live: a remote executor (`Environment.connect…`, `Environment.remote`), and in
 * the Node entry this machine too (environment-node.ts: `Environment.local()`, stdio and WebSocket executors,
 * TCP, and `fs` with streams). This class is the platform-free part, the browser entry's `Environment`.
 */
export class Environment {
  private readonly handles = new Set<ProcessHandle>();
  private readonly attachments = new Set<AttachedProcess>();
  protected closed = false;

  protected constructor(
    private readonly backend: ProcessBackend,
    readonly fs: PortableFs,
    private readonly defaultCwd: string,
    protected onClose: () => Promise<void>,
    /** The executor client when remote (for raw calls), else null. */
    readonly client: ExecServerClient | null,
  ) {}

  /** A remote executor reached through the registry and relay (end-to-end encrypted). */
  static async connectRendezvous(
    options: RendezvousOptions & Omit<ExecServerClientOptions, 'dial'>,
  ): Promise<Environment> {
    return Environment.remote(await ExecServerClient.connectRendezvous(options));
  }

  static remote(client: ExecServerClient): Environment {
    return new Environment(client, new RemoteFs(fsCaller(client)), '/', async () => client.close(), client);
  }

  /** Starts a process; its events, stdin and signals are on the handle. */
  async spawn(argv: string[], options: SpawnOptions = {}): Promise<ProcessHandle> {
    if (this.closed) throw new TetherError('closed', 'the environment is closed');
    if (argv.length === 0) throw new TetherError('invalid_argument', 'argv must not be empty');
    const processId = options.processId ?? crypto.randomUUID();
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
        ...commandStart(options, this.defaultCwd),
        flowWindowBytes: handle.flowWindowBytes,
        sandbox: options.sandbox ?? null,
        network: options.network ?? null,
      });
      handle.started(started);
    } catch (err) {
      handle.startFailed(err as Error);
      throw err;
    }
    return handle;
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
  /** Shares a detached process this key owns (capability `processShare`): a token for another's `attach`. */
  async share(processId: string, options: ShareOptions = {}): Promise<ProcessShareResult> {
    if (this.closed) throw new TetherError('closed', 'the environment is closed');
    return shareProcess(this.client, processId, options);
  }

  /** Revokes a share (`shareId`), or every share of the process; whoever came in by it loses it at once. */
  async unshare(processId: string, shareId?: string): Promise<number> {
    if (this.closed) throw new TetherError('closed', 'the environment is closed');
    return unshareProcess(this.client, processId, shareId);
  }

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

/** The fs calls of a remote environment, on its client; capabilities read per call (a resume may change them). */
export function fsCaller(client: ExecServerClient): FsCaller {
  return {
    call: (method, params, options) => client.call(method, params, options),
    capabilities: () => client.capabilities,
  };
}
