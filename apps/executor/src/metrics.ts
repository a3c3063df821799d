import type { Counter, Histogram } from '@opentelemetry/api';
import { Method } from '@tether/exec-protocol';
import type { TransportKind } from '@tether/jsonrpc';
import type { ProxySettings } from '@tether/outbound';
import {
  type OtelEnv,
  type OtelEnvSettings,
  otelEnvSettings,
  Telemetry,
  TelemetryConfigError,
  type TelemetryOptions,
} from '@tether/telemetry';
import type { ExecutorConfig } from './config.js';

export type RequestResult = 'success' | 'error' | 'disconnected';
export type ProcessResult = 'success' | 'error' | 'terminated';
/**
 * Why the relay socket's multiplexer dropped a frame: Data for a stream it does not know (foreign: another
 * stream's, or one already ended), a binary message that is not a relay frame, or a text message.
 */
export type RelayFrameDropReason = 'unknown_stream' | 'invalid' | 'text';

const TRANSPORTS: readonly TransportKind[] = ['stdio', 'websocket', 'relay'];
/** Method labels are bounded: anything that is not a protocol method is `unknown` (as Codex). */
const KNOWN_METHODS: ReadonlySet<string> = new Set(Object.values(Method));

export function methodLabel(method: string): string {
  return KNOWN_METHODS.has(method) ? method : 'unknown';
}

/** Seconds between two `performance.now()` readings. */
export function secondsSince(startMs: number): number {
  return (performance.now() - startMs) / 1000;
}

/**
 * The executor's telemetry. Codex's `[otel] metrics_exporter` keeps priority and is pushed as Codex pushes it
 * (delta); without it the standard OTEL_* variables may name a collector (delta too unless
 * `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` says otherwise). `OTEL_SERVICE_NAME`,
 * `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_METRIC_EXPORT_INTERVAL` apply either way; `[otel] environment` stays
 * the `env` attribute. `prometheus` (a `--listen ws://` server) adds the cumulative reader for `/metrics`
 * with the process collectors. The executor is often started by another program (Codex, a harness, an agent)
 * with an environment set for other tools, so a variable it cannot use (an OTLP/gRPC collector) does not stop
 * it: the OTEL_* variables are then ignored and `onIgnored` says why.
 */
export function executorTelemetryOptions(
  config: Pick<ExecutorConfig, 'otelEnvironment' | 'metricsExporter'>,
  env: OtelEnv,
  options: {
    serviceVersion: string;
    proxy: ProxySettings;
    prometheus: boolean;
    onError: (err: Error) => void;
    onIgnored: (err: TelemetryConfigError) => void;
  },
): TelemetryOptions {
  let settings: OtelEnvSettings;
  try {
    settings = otelEnvSettings(env);
  } catch (err) {
    if (!(err instanceof TelemetryConfigError)) throw err;
    options.onIgnored(err);
    settings = otelEnvSettings({});
  }
  const exporter = config.metricsExporter ?? settings.otlpHttp;
  return {
    serviceName: settings.serviceName ?? 'tether-executor',
    serviceVersion: options.serviceVersion,
    environment: config.otelEnvironment,
    resourceAttributes: settings.resourceAttributes,
    otlpHttp: exporter ? { ...exporter, proxy: options.proxy } : null,
    temporality: config.metricsExporter ? 'delta' : (settings.temporality ?? 'delta'),
    ...(settings.exportIntervalMs !== null ? { exportIntervalMs: settings.exportIntervalMs } : {}),
    ...(settings.exportTimeoutMs !== null ? { exportTimeoutMs: settings.exportTimeoutMs } : {}),
    prometheus: options.prometheus,
    processMetrics: options.prometheus,
    onError: options.onError,
  };
}

/**
 * The exec-server metrics of Codex (`exec-protocol.md` §8.4), same names, labels and kinds. Gauges
 * are plain numbers read when metrics are collected; counters and histograms are recorded once per
 * connection, request or process, never per output chunk. Labels never carry ids, commands, paths,
 * hosts or URLs.
 */
export class ExecutorMetrics {
  readonly telemetry: Telemetry;
  private readonly connectionsActive = new Map<TransportKind, number>(TRANSPORTS.map((t) => [t, 0]));
  private processesActive = 0;
  private remoteWebsocketActive = 0;
  private remoteGauge = false;
  private readonly connectionsTotal: Counter;
  private readonly requestsTotal: Counter;
  private readonly requestDuration: Histogram;
  private readonly requestQueueDuration: Histogram;
  private readonly requestTotalDuration: Histogram;
  private readonly processesFinished: Counter;
  private readonly processDuration: Histogram;
  private readonly registrationTotal: Counter;
  private readonly registrationDuration: Histogram;
  private readonly websocketConnectTotal: Counter;
  private readonly websocketConnectDuration: Histogram;
  private readonly websocketReconnects: Counter;
  private readonly relayFramesDropped: Counter;
  private readonly networkDecisions: Counter;
  private readonly networkProxies: Counter;
  private networkProxiesOpen = 0;
  private readonly recordingBytes: Counter;
  private readonly recordingDroppedBytes: Counter;
  private readonly recordingFailures: Counter;
  private activeRecordings: () => number = () => 0;

  constructor(telemetry: Telemetry = Telemetry.disabled()) {
    this.telemetry = telemetry;
    const t = telemetry;
    t.gauge('exec_server_connections_active', 'Number of active exec-server connections.', (report) => {
      for (const [transport, value] of this.connectionsActive) report(value, { transport });
    });
    t.gauge('exec_server_processes_active', 'Number of active exec-server processes.', (report) =>
      report(this.processesActive),
    );
    this.connectionsTotal = t.counter(
      'exec_server_connections_total',
      'Total number of accepted exec-server connections.',
    );
    this.requestsTotal = t.counter('exec_server_requests_total', 'Total number of exec-server requests.');
    this.requestDuration = t.durationHistogram(
      'exec_server_request_duration_seconds',
      'Duration of exec-server requests in seconds.',
    );
    this.requestQueueDuration = t.durationHistogram(
      'exec_server_request_queue_duration_seconds',
      'Time exec-server requests spend queued before execution in seconds.',
    );
    this.requestTotalDuration = t.durationHistogram(
      'exec_server_request_total_duration_seconds',
      'Total exec-server request duration in seconds, including queueing, from decoded receipt until response enqueue or disconnection.',
    );
    this.processesFinished = t.counter(
      'exec_server_processes_finished_total',
      'Total number of finished exec-server processes.',
    );
    this.processDuration = t.durationHistogram(
      'exec_server_process_duration_seconds',
      'Duration of exec-server processes in seconds.',
    );
    this.registrationTotal = t.counter(
      'exec_server_remote_registration_total',
      'Total number of remote exec-server registration attempts.',
    );
    this.registrationDuration = t.durationHistogram(
      'exec_server_remote_registration_duration_seconds',
      'Duration of remote exec-server registration attempts in seconds.',
    );
    this.websocketConnectTotal = t.counter(
      'exec_server_remote_websocket_connect_total',
      'Total number of remote exec-server relay websocket connection attempts.',
    );
    this.websocketConnectDuration = t.durationHistogram(
      'exec_server_remote_websocket_connect_duration_seconds',
      'Duration of remote exec-server relay websocket connection attempts in seconds.',
    );
    this.websocketReconnects = t.counter(
      'exec_server_remote_websocket_reconnects_total',
      'Total number of remote exec-server relay websocket reconnects.',
    );
    // Tether's own (Codex has none): a frame dropped this way usually stalls the stream it belonged to.
    this.relayFramesDropped = t.counter(
      'exec_server_remote_relay_frames_dropped_total',
      'Total number of relay frames the remote exec-server dropped on its relay websocket.',
    );
    // Tether's own: the managed network proxy (network-proxy.ts). Labels are bounded sets: never a host.
    this.networkDecisions = t.counter(
      'tether_network_proxy_decisions_total',
      'Total number of managed network proxy decisions, by protocol, decision and reason.',
    );
    this.networkProxies = t.counter('tether_network_proxies_total', 'Total number of managed network proxies started.');
    t.gauge('tether_network_proxies_active', 'Number of managed network proxies running.', (report) =>
      report(this.networkProxiesOpen),
    );
    // Tether's own: session recordings (--record-dir, recordings.ts).
    t.gauge('tether_recordings_active', 'Number of process sessions being recorded.', (report) =>
      report(this.activeRecordings()),
    );
    this.recordingBytes = t.counter('tether_recording_bytes_total', 'Total bytes written to session recordings.');
    this.recordingDroppedBytes = t.counter(
      'tether_recording_dropped_bytes_total',
      'Total bytes of recording events dropped because a recording could not keep up (policy open).',
    );
    this.recordingFailures = t.counter(
      'tether_recording_failures_total',
      'Total number of recordings that failed (cause: open, write, queue_full), by the failure policy applied.',
    );
  }

  /** A process's managed proxy started; the returned function (idempotent) marks it closed. */
  networkProxyStarted(): () => void {
    this.networkProxies.add(1);
    this.networkProxiesOpen++;
    let open = true;
    return () => {
      if (!open) return;
      open = false;
      this.networkProxiesOpen--;
    };
  }

  /** One decision of a managed proxy (`reason`: a bounded label, network-proxy.ts's `reasonLabel`). */
  networkDecision(protocol: string, decision: 'allow' | 'deny', reason: string): void {
    this.networkDecisions.add(1, { protocol, decision, reason });
  }

  /** The number of active recordings, read when /metrics is scraped. */
  recordingsActive(count: () => number): void {
    this.activeRecordings = count;
  }

  recordingWritten(bytes: number): void {
    this.recordingBytes.add(bytes);
  }

  recordingDropped(bytes: number): void {
    this.recordingDroppedBytes.add(bytes);
  }

  recordingFailed(policy: 'open' | 'closed', cause: 'open' | 'write' | 'queue_full'): void {
    this.recordingFailures.add(1, { policy, cause });
  }

  /**
   * A connection was accepted; the returned function (idempotent) marks it closed. The spec lists a
   * `result=accepted` label, but codex 0.171.0 sends `exec_server_connections_total{transport}` only.
   */
  connectionOpened(transport: TransportKind): () => void {
    this.connectionsTotal.add(1, { transport });
    this.connectionsActive.set(transport, (this.connectionsActive.get(transport) ?? 0) + 1);
    let open = true;
    return () => {
      if (!open) return;
      open = false;
      this.connectionsActive.set(transport, (this.connectionsActive.get(transport) ?? 1) - 1);
    };
  }

  /** A request was admitted to run after waiting `queuedSeconds` in its lane. */
  requestAdmitted(method: string, queuedSeconds: number): void {
    this.requestQueueDuration.record(queuedSeconds, { method: methodLabel(method) });
  }

  /** A request ended: answered (`success`/`error`) or dropped because the transport went away. */
  requestFinished(method: string, result: RequestResult, runSeconds: number | null, totalSeconds: number): void {
    const attributes = { method: methodLabel(method), result };
    this.requestsTotal.add(1, attributes);
    if (runSeconds !== null) this.requestDuration.record(runSeconds, attributes);
    this.requestTotalDuration.record(totalSeconds, attributes);
  }

  /** A process start was accepted (counted active until it exits or its start fails). */
  processStarting(): void {
    this.processesActive++;
  }

  /** A start that was counted by `processStarting` failed: no process ran. */
  processStartFailed(): void {
    this.processesActive--;
  }

  processFinished(result: ProcessResult, seconds: number): void {
    this.processesActive--;
    this.processesFinished.add(1, { result });
    this.processDuration.record(seconds, { result });
  }

  registration(result: 'success' | 'error', seconds: number): void {
    this.registrationTotal.add(1, { result });
    this.registrationDuration.record(seconds, { result });
  }

  websocketConnect(result: 'success' | 'error' | 'rejected', seconds: number): void {
    this.websocketConnectTotal.add(1, { result });
    this.websocketConnectDuration.record(seconds, { result });
  }

  /** Remote mode: the relay-socket gauge exists only then (local codex does not send it either). */
  remoteModeStarted(): void {
    if (this.remoteGauge) return;
    this.remoteGauge = true;
    this.telemetry.gauge(
      'exec_server_remote_websocket_active',
      'Number of active remote exec-server relay websockets.',
      (report) => report(this.remoteWebsocketActive),
    );
  }

  websocketUp(): void {
    this.remoteWebsocketActive++;
  }

  websocketDown(): void {
    this.remoteWebsocketActive--;
  }

  websocketReconnect(reason: 'connect_failed' | 'disconnected' | 'rejected'): void {
    this.websocketReconnects.add(1, { reason });
  }

  relayFrameDropped(reason: RelayFrameDropReason): void {
    this.relayFramesDropped.add(1, { reason });
  }

  /** Current gauge values (for tests and diagnostics). */
  snapshot(): { connectionsActive: Record<string, number>; processesActive: number; remoteWebsocketActive: number } {
    return {
      connectionsActive: Object.fromEntries(this.connectionsActive),
      processesActive: this.processesActive,
      remoteWebsocketActive: this.remoteWebsocketActive,
    };
  }
}
