/**
 * `ExecServerClient` of the Node entry: the platform-free client (exec-client.ts) plus what needs Node:
 * executors on a plain WebSocket (`ws`) or a child's stdio, the rendezvous on Node's platform, and TCP
 * forwarding (Node streams).
 */
import type { ChildProcess } from 'node:child_process';
import { Notification } from '@tether/exec-protocol';
import { encodeWithAttachment } from '@tether/jsonrpc';
import type { ExecServerClientOptions } from './client-options.js';
import { ExecServerClient as PlatformClient } from './exec-client.js';
import type { RendezvousOptions } from './rendezvous-dialer.js';
import { withNodePlatform } from './rendezvous-node.js';
import { stdioDialer } from './stdio-dialer.js';
import { TcpForwarder } from './tcp.js';

export type { ClientCallOptions, InitializeInfo } from './exec-client.js';

export class ExecServerClient extends PlatformClient {
  /** Forwarded TCP connections (`tcp/*`), made on first use; they end with the connection they were made on. */
  private tcpForwarder: TcpForwarder | null = null;
  /** The executor process this client started (`connectStdio`), ended on close. */
  private ownedChild: ChildProcess | null = null;

  protected static override create(options: ExecServerClientOptions): ExecServerClient {
    return new ExecServerClient(options);
  }

  static override connect(options: ExecServerClientOptions): Promise<ExecServerClient> {
    // biome-ignore lint/complexity/noThisInStatic: the subclass's statics make its own clients (`create`)
    return super.connect(options) as Promise<ExecServerClient>;
  }

  /** A plain WebSocket executor (`executor --listen ws://…`, `codex exec-server --listen ws://…`). */
  static connectWebSocket(url: string, options: Omit<ExecServerClientOptions, 'dial'> = {}): Promise<ExecServerClient> {
    return ExecServerClient.connect({
      ...options,
      dial: async (signal, onPhase) => {
        onPhase?.('websocket');
        return (await import('./dial-node.js')).dialWebSocket(url, signal);
      },
    });
  }

  /**
   * An executor started as a child process speaking JSON-RPC on its stdin/stdout (`executor --listen stdio`,
   * `codex exec-server --listen stdio`). The child is this client's: `close()` ends its stdin and, if it
   * lingers, kills it. A stdio session cannot be resumed, so there is no reconnect.
   */
  static connectStdio(
    command: string[],
    options: Omit<ExecServerClientOptions, 'dial' | 'reconnect'> & { env?: NodeJS.ProcessEnv; cwd?: string } = {},
  ): Promise<ExecServerClient> {
    const stdio = stdioDialer(command, options);
    return ExecServerClient.connect({
      ...options,
      reconnect: false,
      // Each attempt would start another executor.
      connectRetry: false,
      dial: stdio.dial,
    }).then(
      (client) => {
        client.ownedChild = stdio.child();
        return client;
      },
      (err: unknown) => {
        stdio.kill();
        throw err;
      },
    );
  }

  /**
   * An environment through the rendezvous: a bundle from the registry, the relay socket, the Noise IK
   * handshake with the executor key the registry vouches for. Every (re)connect uses a fresh bundle
   * and stream; the identity stays. Node's platform unless `options.platform` says otherwise.
   */
  static override connectRendezvous(
    options: RendezvousOptions & Omit<ExecServerClientOptions, 'dial'>,
  ): Promise<ExecServerClient> {
    // biome-ignore lint/complexity/noThisInStatic: the subclass's statics make its own clients (`create`)
    return super.connectRendezvous(withNodePlatform(options)) as Promise<ExecServerClient>;
  }

  override close(reason = 'client closed'): void {
    if (this.isClosed) return;
    super.close(reason);
    const child = this.ownedChild;
    if (child && child.exitCode === null && child.signalCode === null) {
      child.stdin?.end();
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      timer.unref();
      child.once('exit', () => clearTimeout(timer));
    }
  }

  /** Resolves when the child started by `connectStdio` has exited (at once for other transports). */
  async whenChildExited(): Promise<void> {
    const child = this.ownedChild;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    await new Promise((resolve) => child.once('exit', resolve));
  }

  /** TCP forwarding (capability `tcpForward`): `tcp.connect(host, port)` opens a Duplex to host:port there. */
  get tcp(): TcpForwarder {
    this.tcpForwarder ??= new TcpForwarder({
      call: (method, params) => this.call(method, params),
      notify: (method, params) => this.notify(method, params),
      capabilities: () => this.capabilities,
      sendData: (streamId, chunk) => {
        if (this.capability('binaryInput') && this.connection?.carriesAttachments) {
          const head = JSON.stringify({ method: Notification.tcpData, params: { streamId } });
          this.connection.sendRaw(encodeWithAttachment(head, chunk));
        } else {
          this.notify(Notification.tcpData, { streamId, dataBase64: chunk.toString('base64') });
        }
      },
    });
    return this.tcpForwarder;
  }

  protected override connectionGone(error: Error): void {
    this.tcpForwarder?.failAll(error);
  }

  protected override onTcpNotification(method: string, params: unknown): void {
    this.tcpForwarder?.onNotification(method, params);
  }
}
