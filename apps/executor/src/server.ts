import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Readable, Writable } from 'node:stream';
import { ReadBufferPool } from '@tether/bytes';
import { type EnvironmentInfo, ErrorCode } from '@tether/exec-protocol';
import {
  MALFORMED_MESSAGE_ID,
  malformedMessageText,
  RpcConnection,
  StdioTransport,
  WebSocketTransport,
} from '@tether/jsonrpc';
import { createReaper, OutputBudget, PipeGrowth, type ProcessReaper } from '@tether/local-process';
import { loadNativePipe } from '@tether/native-pipe';
import type { ProxySettings } from '@tether/outbound';
import { MAX_RECORD_PLAINTEXT_BYTES, MESSAGE_LENGTH_PREFIX_BYTES } from '@tether/relay-frames';
import { Sandboxer } from '@tether/sandbox';
import { PROMETHEUS_CONTENT_TYPE } from '@tether/telemetry';
import { WebSocketServer } from 'ws';
import { DEFAULT_CONFIG, type ExecutorConfig } from './config.js';
import { ConnectionProcessor } from './connection-processor.js';
import { CredentialMasking } from './credential-masking.js';
import { environmentInfo } from './environment-info.js';
import { confinedOpenAvailable } from './fs/confined.js';
import { formatWebSocketUrl } from './listen-url.js';
import { type Logger, silentLogger } from './logger.js';
import { ExecutorMetrics } from './metrics.js';
import type { Principal } from './principal.js';
import { Recordings, recordingOptions } from './recordings.js';
import { SessionRegistry } from './session-registry.js';
import { ShellSnapshots } from './shell-snapshot.js';
import { type ForwardOptions, forwardOptions } from './tcp/policy.js';

export interface ExecServerOptions {
  config?: Partial<ExecutorConfig>;
  logger?: Logger;
  /** Kill children even if this process is SIGKILLed (default true). */
  reaper?: boolean;
  /**
   * Also adopt and kill descendants that escape their process group (setsid): the process becomes a child
   * subreaper (local-process's createReaper). For the executor bin only, whose every spawner (process
   * tables, the sandboxed fs helpers) is handed the adopter to note its children; one per process, so an
   * embedding (tests, the SDK) leaves it off (default false).
   */
  subreaper?: boolean;
  /** Where the exec-server metrics go (default: nowhere). */
  metrics?: ExecutorMetrics;
  /** The sandbox to use (its creator closes it); default: one of its own (bubblewrap on PATH), closed with it. */
  sandbox?: Sandboxer;
  /** The proxies of `http/request` (the CLI's come from HTTPS_PROXY/HTTP_PROXY/NO_PROXY); default none. */
  proxy?: ProxySettings;
}

/**
 * The exec-server: owns the session registry, every connection processor, the WebSocket listener and
 * the child reaper. Any transport becomes an RpcConnection handed to `serve()`. `close()` stops
 * accepting, closes connections, kills every process and waits until all of it is gone.
 */
/** Room left in a record for the message length prefix and a process/output header (ids up to ~400 bytes). */
const OUTPUT_READ_BYTES = MAX_RECORD_PLAINTEXT_BYTES - MESSAGE_LENGTH_PREFIX_BYTES - 512;
/**
 * A read of a raised pipe (PipeGrowth: a child streaming faster than we read) fills eight records: one
 * message, sealed and sent in one write, per eight records' worth of output. bench:path row 1, 2026-12-07:
 * against one record per read, the executor's and the relay's CPU per 256 MiB fell by about a fifth and the
 * harness's by a tenth (an eighth of the wakeups, output notifications and writes at every hop); against
 * four records (and 256 KiB pipes), 3 % less wall time and 5 % less harness CPU (farm-bench, 12 pairs);
 * sixteen records gained no more time.
 */
const BULK_OUTPUT_READ_BYTES = 8 * MAX_RECORD_PLAINTEXT_BYTES - MESSAGE_LENGTH_PREFIX_BYTES - 512;

export class ExecServer {
  readonly config: ExecutorConfig;
  readonly registry: SessionRegistry;
  readonly metrics: ExecutorMetrics;
  private readonly logger: Logger;
  private readonly info: EnvironmentInfo;
  /** Forwarding's policy and bounds, parsed once from the config (every connection shares them). */
  private readonly forward: ForwardOptions;
  private readonly proxy: ProxySettings | undefined;
  private readonly reaper: ProcessReaper | null;
  /** bubblewrap and the seccomp filter for `sandbox` profiles (closed after the last process). */
  readonly sandbox: Sandboxer;
  private readonly ownsSandbox: boolean;
  private readonly processors = new Set<ConnectionProcessor>();
  /** Read buffers for every process's output pipes (closed with the server, after the last process). */
  private readonly readBuffers: ReadBufferPool;
  /** Credential masking's CA and dummies, shared by every connection (closed with the server). */
  private readonly credentialMasking = new CredentialMasking();
  /** Session recordings (`--record-dir`; closed with the server, after the last process), or null. */
  readonly recordings: Recordings | null;
  /** Login-shell snapshots of every connection's principal (`shellSnapshotV2`; closed with the server). */
  private readonly shellSnapshots = new ShellSnapshots();
  private http: Server | null = null;
  private wss: WebSocketServer | null = null;
  private closing: Promise<void> | null = null;
  /** Extra readiness condition for `/readyz` (remote mode: the relay link is up). */
  readinessCheck: (() => boolean) | null = null;

  constructor(options: ExecServerOptions = {}) {
    this.config = { ...DEFAULT_CONFIG, ...options.config };
    this.logger = options.logger ?? silentLogger();
    this.metrics = options.metrics ?? new ExecutorMetrics();
    this.forward = forwardOptions(this.config);
    this.proxy = options.proxy;
    this.ownsSandbox = options.sandbox === undefined;
    this.sandbox = options.sandbox ?? Sandboxer.open();
    const info = environmentInfo(process.env, { prependPathDirs: this.config.prependPathDirs });
    // `tcpForward` only where this executor forwards (not with --no-forward); `processSandbox` where
    // bubblewrap works here (`networkProxyLaunch` too); `sandboxedFileStreaming` where, besides, the sandbox can hand back what it opened.
    this.info = {
      ...info,
      capabilities: {
        ...info.capabilities,
        ...(this.forward.policy === null ? { tcpForward: false } : {}),
        processSandbox: this.sandbox.status.available,
        // Codex's: a writable `/` keeps the profile's denials and a working /dev (@tether/sandbox bwrap.ts,
        // policy.ts); promises about sandboxed starts, so only where the sandbox works.
        linuxRootWritePreservesDevices: this.sandbox.status.available,
        linuxApprovedRootWritePreservesRestrictions: this.sandbox.status.available,
        sandboxedFileStreaming: confinedOpenAvailable(this.sandbox),
        // Codex's managed network proxy: a sandboxed start that enforces it runs in a network namespace of its
        // own behind a relay to the proxy (handlers/process.ts), which needs bubblewrap and the native addon that
        // passes the relay its connections.
        networkProxyLaunch: this.sandbox.status.available && loadNativePipe() !== null,
        // `network/policyRequest` to a client that opts in (`policyDecisionTimeoutMs`): wherever the proxy is.
        networkProxyReviewDomains: this.sandbox.status.available && loadNativePipe() !== null,
        // The command's own TCP through the SOCKS5 listener: where, besides, the executor can redirect a sandbox
        // namespace's TCP to the relay (root, ip and nft, NAT in a user namespace: @tether/sandbox transparent-tcp.ts).
        networkProxyTransparentTcp:
          this.sandbox.status.available && loadNativePipe() !== null && this.sandbox.transparentTcp.available,
        // `proxy.credentialMasking` (+ `credentialProviders`): dummies in a `bash -c` command's environment, the
        // real values swapped back in intercepted TLS to their bound destinations (credential-masking.ts).
        credentialMasking: this.sandbox.status.available && loadNativePipe() !== null,
        credentialMaskingCustomProviders: this.sandbox.status.available && loadNativePipe() !== null,
      },
    };
    this.recordings =
      this.config.recordDir === null
        ? null
        : new Recordings(recordingOptions(this.config, this.config.recordDir), this.metrics, (message) =>
            this.logger.warn(message),
          );
    this.reaper = options.reaper === false ? null : createReaper({ subreaper: options.subreaper === true });
    this.readBuffers = new ReadBufferPool({ bufferBytes: OUTPUT_READ_BYTES, bulkBufferBytes: BULK_OUTPUT_READ_BYTES });
    this.registry = new SessionRegistry({
      detachedTtlMs: this.config.detachedTtlMs,
      maxSessions: this.config.maxSessions,
      maxDetachedProcesses: this.config.maxDetachedProcesses,
      detachedExitedRetentionMs: this.config.detachedExitedRetentionMs,
      logger: this.logger,
      metrics: this.metrics,
      tableOptions: {
        retainedOutputBytes: this.config.retainedOutputBytes,
        retainedOutputChunks: this.config.retainedOutputChunks,
        exitedRetentionMs: this.config.exitedRetentionMs,
        maxProcesses: this.config.maxProcessesPerSession,
        reaper: this.reaper,
        // With a subreaper, every child is noted as ours, so that adoption never takes one for an orphan.
        adopter: this.reaper?.adopter ?? null,
        // Output chunks are encoded as soon as they are emitted or read (ConnectionProcessor, process/read),
        // so their read buffers can be recycled when retention drops them.
        // A chunk read fits one secure-stream record with its process/output header (a 64 KiB read took
        // a full record and a 4 KiB one: twice the records to seal, forward and open per chunk); a raised
        // pipe's read fills eight whole records (BULK_OUTPUT_READ_BYTES).
        readBuffers: this.readBuffers,
        // Pipes of children that stream (output filling reads, stdin in large writes) are raised to 512 KiB,
        // at most 32 at once for the whole executor (16 MiB of the user's 64 MiB pipe budget).
        pipeGrowth: new PipeGrowth(),
        // One budget for every session's flow-controlled processes: memory stays bounded however many
        // harnesses stream at once, while one busy stream still gets its whole window.
        outputBudget: new OutputBudget(this.config.flowOutputBudgetBytes),
      },
    });
  }

  /** Serves one connection until it closes. */
  /** `principal`: who the connection acts for (a relay stream's key); default the local principal. */
  serve(
    connection: RpcConnection,
    options: { endSessionOnClose?: boolean; principal?: Principal } = {},
  ): ConnectionProcessor {
    const processor = new ConnectionProcessor(connection, {
      registry: this.registry,
      concurrency: this.config.concurrentRequests,
      environmentInfo: this.info,
      logger: this.logger,
      endSessionOnClose: options.endSessionOnClose ?? false,
      ...(options.principal ? { principal: options.principal } : {}),
      maxReadFileBytes: this.config.maxReadFileBytes,
      maxFileHandles: this.config.maxFileHandles,
      metrics: this.metrics,
      forward: this.forward,
      sandbox: this.sandbox,
      adopter: this.reaper?.adopter ?? null,
      shellSnapshots: this.shellSnapshots,
      recordings: this.recordings,
      credentialMasking: this.credentialMasking,
      ...(this.proxy ? { proxy: this.proxy } : {}),
    });
    this.processors.add(processor);
    void processor.done.then(() => this.processors.delete(processor));
    if (this.closing) {
      connection.close('exec-server is shutting down', 1001);
      return processor;
    }
    processor.start();
    return processor;
  }

  /** Serves the single stdio client; resolves when it disconnects (stdin EOF) and its session is gone. */
  async serveStdio(input: Readable, output: Writable): Promise<void> {
    const transport = new StdioTransport({
      input,
      output,
      maxMessageBytes: this.config.maxMessageBytes,
      onOversize: (bytes) => this.refuseOversize(connection, bytes),
    });
    const connection = new RpcConnection(transport);
    await this.serve(connection, { endSessionOnClose: true }).done;
  }

  /** The answer to a message over `max_message_bytes` (Codex's wording for a message it cannot parse). */
  private refuseOversize(connection: RpcConnection, bytes: number): void {
    connection.sendError(MALFORMED_MESSAGE_ID, {
      code: ErrorCode.invalidRequest,
      message: malformedMessageText(
        connection,
        `message of ${bytes} bytes exceeds the limit of ${this.config.maxMessageBytes} bytes`,
      ),
    });
  }

  /** Binds the WebSocket listener (with /readyz, /livez and /metrics) and returns its `ws://IP:PORT`. */
  async listen(host: string, port: number): Promise<string> {
    if (this.http) throw new Error('already listening');
    const wss = new WebSocketServer({ noServer: true, maxPayload: this.config.maxMessageBytes });
    const http = createServer((req, res) => this.onHttpRequest(req, res));
    http.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
      if (req.headers.origin !== undefined) return refuseUpgrade(socket, 403, 'Forbidden');
      if (this.closing) return refuseUpgrade(socket, 503, 'Service Unavailable');
      if ((req.url ?? '/').split('?')[0] !== '/') return refuseUpgrade(socket, 404, 'Not Found');
      wss.handleUpgrade(req, socket, head, (ws) => {
        const peer = `${req.socket.remoteAddress}:${req.socket.remotePort}`;
        const transport = new WebSocketTransport(ws, {
          peer,
          pingIntervalMs: this.config.pingIntervalMs,
          fastReceive: { server: true, maxPayload: this.config.maxMessageBytes },
        });
        this.serve(new RpcConnection(transport));
      });
    });
    this.wss = wss;
    this.http = http;
    await new Promise<void>((resolve, reject) => {
      http.once('error', reject);
      http.listen({ host, port }, () => {
        http.off('error', reject);
        resolve();
      });
    });
    const address = http.address();
    if (address === null || typeof address === 'string') throw new Error('listener has no TCP address');
    const url = formatWebSocketUrl(address.address, address.port);
    this.logger.info({ url }, 'exec-server listening');
    return url;
  }

  private onHttpRequest(req: IncomingMessage, res: ServerResponse): void {
    // Browsers always send Origin; no page may drive this server (spec §1.2).
    if (req.headers.origin !== undefined) {
      res.writeHead(403).end();
      return;
    }
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/livez') {
      res.writeHead(200).end();
      return;
    }
    if (req.method === 'GET' && path === '/readyz') {
      const ready = !this.closing && (this.readinessCheck?.() ?? true);
      res.writeHead(ready ? 200 : 503).end();
      return;
    }
    if (req.method === 'GET' && path === '/metrics') {
      this.serveMetrics(res);
      return;
    }
    if (path === '/') {
      res.writeHead(400, { 'content-type': 'text/plain' }).end("Connection header did not include 'upgrade'");
      return;
    }
    res.writeHead(404).end();
  }

  /** The exec_server_* instruments (cumulative) and the process metrics, when the telemetry keeps them. */
  private serveMetrics(res: ServerResponse): void {
    const telemetry = this.metrics.telemetry;
    if (!telemetry.servesPrometheus) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('metrics are not kept by this executor\n');
      return;
    }
    telemetry.prometheus().then(
      (text) => res.writeHead(200, { 'content-type': PROMETHEUS_CONTENT_TYPE }).end(text),
      (err: Error) => {
        this.logger.warn({ err: err.message }, 'metrics collection failed');
        res.writeHead(500).end();
      },
    );
  }

  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  private async shutdown(): Promise<void> {
    const http = this.http;
    const stopped = http ? new Promise<void>((resolve) => http.close(() => resolve())) : Promise.resolve();
    for (const processor of this.processors) processor.close();
    this.shellSnapshots.close();
    await this.registry.shutdown();
    for (const client of this.wss?.clients ?? []) client.terminate();
    http?.closeAllConnections();
    await stopped;
    this.wss?.close();
    await Promise.all([...this.processors].map((processor) => processor.done));
    await this.reaper?.close();
    // After the last process: every recording has its exit and final seal queued.
    await this.recordings?.close();
    this.readBuffers.close();
    // The MITM CA's bundle (credential masking) goes with the executor.
    await this.credentialMasking.close();
    if (this.ownsSandbox) this.sandbox.close();
    this.logger.info('exec-server shutdown complete');
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

function refuseUpgrade(socket: Socket, status: number, text: string): void {
  // Upgrade sockets have no error listener of Node's: a peer's reset must not become an uncaught error.
  socket.on('error', () => socket.destroy());
  socket.end(`HTTP/1.1 ${status} ${text}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
}
