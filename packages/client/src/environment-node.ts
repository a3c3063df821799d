/**
 * `Environment` of the Node entry: the platform-free environment (environment.ts) plus this machine
 * (`Environment.local()`: local processes and files), executors on stdio or a plain WebSocket, the rendezvous
 * on Node's platform, TCP connections, and `fs` with Node streams.
 */
import type { ProcessBackend } from './backend.js';
import type { ExecServerClientOptions } from './client-options.js';
import { fsCaller, Environment as PlatformEnvironment } from './environment.js';
import { TetherError } from './errors.js';
import { ExecServerClient } from './exec-client-node.js';
import type { EnvironmentFs } from './fs.js';
import { LocalBackend } from './local-backend.js';
import { LocalFs } from './local-fs.js';
import { RemoteFs } from './remote-fs-node.js';
import type { RendezvousOptions } from './rendezvous-dialer.js';
import { type ConnectTcpOptions, connectLocalTcp, type TcpDuplex } from './tcp.js';

export type { SpawnOptions } from './environment.js';

/**
 * Where processes run and files live: this machine (`Environment.local()`) or a remote executor
 * (`Environment.connect…`). Both offer the same `spawn`/`exec` and `fs`.
 */
export class Environment extends PlatformEnvironment {
  declare readonly fs: EnvironmentFs;
  declare readonly client: ExecServerClient | null;

  protected constructor(
    backend: ProcessBackend,
    fs: EnvironmentFs,
    defaultCwd: string,
    onClose: () => Promise<void>,
    client: ExecServerClient | null,
  ) {
    super(backend, fs, defaultCwd, onClose, client);
  }

  static local(): Environment {
    const backend = new LocalBackend();
    return new Environment(backend, new LocalFs(), process.cwd(), () => backend.close(), null);
  }

  /** A remote executor reached through the registry and relay (end-to-end encrypted). */
  static override async connectRendezvous(
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

  static override remote(client: ExecServerClient): Environment {
    return new Environment(client, new RemoteFs(fsCaller(client)), '/', async () => client.close(), client);
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
}
