import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_MAX_DETACHED_PROCESSES } from '@tether/exec-protocol';
import { parse as parseToml } from 'smol-toml';
import { DEFAULT_MAX_FORWARDED_STREAMS } from './tcp/forwards.js';
import { DEFAULT_FORWARD_ALLOW, ForwardPolicy, ForwardPolicyError } from './tcp/policy.js';

/** How long an exited detached process stays readable (and attachable) by default: 10 minutes. */
export const DEFAULT_DETACHED_EXITED_RETENTION_MS = 10 * 60_000;

/** Everything the executor can be configured with; defaults match Codex where Codex has a value. */
export interface ExecutorConfig {
  /** How long a detached session keeps its processes for a resume. */
  detachedTtlMs: number;
  /** Retained output per process (bytes). */
  retainedOutputBytes: number;
  /** Retained chunks per process. */
  retainedOutputChunks: number;
  /** Unacknowledged output held for all flow-controlled processes together (each gets its fair share). */
  flowOutputBudgetBytes: number;
  /** How long a closed process stays readable. */
  exitedRetentionMs: number;
  /** Processes per session, in any state. */
  maxProcessesPerSession: number;
  /** Detached processes (owned by the executor, outliving sessions) at once, in any state. */
  maxDetachedProcesses: number;
  /** How long a closed detached process stays readable and attachable. */
  detachedExitedRetentionMs: number;
  /** Largest inbound JSON-RPC message. */
  maxMessageBytes: number;
  /** WebSocket keepalive ping interval; 0 disables. */
  pingIntervalMs: number;
  /** `--concurrent-requests`. */
  concurrentRequests: number;
  /** Sessions at once; an initialize beyond it is refused. */
  maxSessions: number;
  logLevel: string;
  /** Largest file `fs/readFile` returns (Codex `[filesystem] max_read_file_bytes`). */
  maxReadFileBytes: number;
  /** `fs/open` handles open at once per connection. */
  maxFileHandles: number;
  /** TCP forwarding (`tcp/connect`); `--no-forward` or `[forward] enabled = false` turns it off. */
  forwardEnabled: boolean;
  /** Targets forwarding may reach (`--forward-allow`, `[forward] allow`; see tcp/policy.ts). */
  forwardAllow: readonly string[];
  /** `[environment] prepend_path_dirs`: directories reported as `environmentInfo.prependPathDirs`. */
  prependPathDirs: readonly string[];
  /** Forwarded connections at once per executor connection. */
  forwardMaxConnections: number;
  /** Codex `[otel] environment`: the `env` resource attribute of exported metrics. */
  otelEnvironment: string;
  /** Codex `[otel] metrics_exporter`: where metrics are pushed (OTLP/HTTP), or null for nowhere. */
  metricsExporter: MetricsExporterConfig | null;
  /**
   * Codex `[analytics] enabled`. Accepted for config compatibility; like `codex exec-server` 0.171.0 it
   * does not gate exec-server metrics (`metrics_exporter` alone does).
   */
  analyticsEnabled: boolean;
  /** `--record-dir`, `[recording] dir`: every process session is recorded there (recordings.ts); null: none. */
  recordDir: string | null;
  /** `--record-failure`, `[recording] failure`: what a recording that cannot be written does to its process. */
  recordFailure: 'open' | 'closed';
  /** `[recording] max_file_bytes`: a recording past it goes on in its next part. */
  recordMaxFileBytes: number;
  /** `[recording] max_file_age_sec`: …or past this age. */
  recordMaxFileAgeMs: number;
  /** `[recording] queue_bytes`: events queued per recording before the failure policy applies. */
  recordQueueBytes: number;
}

/** `metrics_exporter = { otlp-http = { endpoint = "URL", protocol = "json" | "binary", headers = {…} } }` */
export interface MetricsExporterConfig {
  endpoint: string;
  protocol: 'json' | 'binary';
  headers?: Record<string, string>;
}

export const DEFAULT_CONFIG: ExecutorConfig = {
  detachedTtlMs: 30_000,
  retainedOutputBytes: 1024 * 1024,
  retainedOutputChunks: 50_000,
  flowOutputBudgetBytes: 64 * 1024 * 1024,
  exitedRetentionMs: 30_000,
  maxProcessesPerSession: 1024,
  maxDetachedProcesses: DEFAULT_MAX_DETACHED_PROCESSES,
  detachedExitedRetentionMs: DEFAULT_DETACHED_EXITED_RETENTION_MS,
  maxMessageBytes: 16 * 1024 * 1024,
  pingIntervalMs: 30_000,
  concurrentRequests: 1,
  maxSessions: 1024,
  logLevel: 'info',
  maxReadFileBytes: 512 * 1024 * 1024,
  maxFileHandles: 128,
  forwardEnabled: true,
  forwardAllow: DEFAULT_FORWARD_ALLOW,
  forwardMaxConnections: DEFAULT_MAX_FORWARDED_STREAMS,
  prependPathDirs: [],
  otelEnvironment: 'dev',
  metricsExporter: null,
  analyticsEnabled: true,
  recordDir: null,
  recordFailure: 'open',
  recordMaxFileBytes: 256 * 1024 * 1024,
  recordMaxFileAgeMs: 24 * 3600 * 1000,
  recordQueueBytes: 8 * 1024 * 1024,
};

/** A value the config cannot take, with the reason. */
class Invalid {
  constructor(readonly error: string) {}
}

interface KeySpec {
  key: keyof ExecutorConfig;
  /** Converts the TOML value into the config value; returns an Invalid when it cannot. */
  read: (value: unknown) => unknown;
}

const positiveInt = (scale: number, max: number) => (value: unknown) =>
  typeof value === 'number' && Number.isInteger(value) && value > 0 && value * scale <= max
    ? value * scale
    : new Invalid(`must be an integer between 1 and ${Math.floor(max / scale)}`);
const nonNegativeInt = (scale: number, max: number) => (value: unknown) =>
  typeof value === 'number' && Number.isInteger(value) && value >= 0 && value * scale <= max
    ? value * scale
    : new Invalid(`must be an integer between 0 and ${Math.floor(max / scale)}`);

const isTable = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Date);

/** Codex's `metrics_exporter` shape; `"none"` switches export off. */
function readMetricsExporter(value: unknown): MetricsExporterConfig | null | Invalid {
  if (value === 'none') return null;
  const shape = 'must be "none" or { otlp-http = { endpoint = "URL", protocol = "json" | "binary" } }';
  if (typeof value === 'string') return new Invalid(`\`${value}\` is not supported by this executor: ${shape}`);
  if (!isTable(value)) return new Invalid(shape);
  const kinds = Object.keys(value);
  if (kinds.length !== 1 || kinds[0] !== 'otlp-http') {
    return new Invalid(`${kinds.join(', ') || 'an empty table'} is not supported by this executor: ${shape}`);
  }
  const body = value['otlp-http'];
  if (!isTable(body)) return new Invalid(shape);
  for (const key of Object.keys(body)) {
    if (!['endpoint', 'protocol', 'headers'].includes(key)) return new Invalid(`unknown field \`otlp-http.${key}\``);
  }
  const { endpoint, protocol, headers } = body;
  if (typeof endpoint !== 'string') return new Invalid('`otlp-http.endpoint` must be an http(s) URL');
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    return new Invalid('`otlp-http.endpoint` must be an http(s) URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return new Invalid('`otlp-http.endpoint` must be an http(s) URL');
  }
  if (protocol === undefined) return new Invalid('missing field `otlp-http.protocol`');
  if (protocol !== 'json' && protocol !== 'binary') {
    return new Invalid(`unknown \`otlp-http.protocol\` ${JSON.stringify(protocol)}, expected \`binary\` or \`json\``);
  }
  if (headers === undefined) return { endpoint, protocol };
  if (!isTable(headers) || Object.values(headers).some((header) => typeof header !== 'string')) {
    return new Invalid('`otlp-http.headers` must be a table of strings');
  }
  return { endpoint, protocol, headers: headers as Record<string, string> };
}
/** `[forward] allow = ["loopback", "10.0.0.0/8:5432", …]`, checked as `--forward-allow` is. */
function readForwardAllow(value: unknown): readonly string[] | Invalid {
  if (!Array.isArray(value) || value.some((entry) => typeof entry !== 'string')) {
    return new Invalid('must be an array of strings');
  }
  try {
    ForwardPolicy.parse(value as string[]);
  } catch (err) {
    return new Invalid(err instanceof ForwardPolicyError ? err.problem : (err as Error).message);
  }
  return value as string[];
}
/** A list of absolute paths (reported to clients as file URIs). */
function readAbsoluteDirs(value: unknown): readonly string[] | Invalid {
  if (!Array.isArray(value) || value.some((entry) => typeof entry !== 'string' || !entry.startsWith('/'))) {
    return new Invalid('must be an array of absolute paths');
  }
  return value as string[];
}
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/** The TOML schema: `[section] key = value`. Anything else is an unknown key. */
const SCHEMA: Record<string, Record<string, KeySpec>> = {
  sessions: {
    detached_ttl_sec: { key: 'detachedTtlMs', read: positiveInt(1000, 24 * 3600 * 1000) },
    max_sessions: { key: 'maxSessions', read: positiveInt(1, 100_000) },
  },
  processes: {
    retained_output_bytes_per_process: { key: 'retainedOutputBytes', read: positiveInt(1, 1024 ** 3) },
    retained_output_chunks_per_process: { key: 'retainedOutputChunks', read: positiveInt(1, 10_000_000) },
    flow_output_budget_bytes: { key: 'flowOutputBudgetBytes', read: positiveInt(1, 64 * 1024 ** 3) },
    exited_process_retention_sec: { key: 'exitedRetentionMs', read: nonNegativeInt(1000, 24 * 3600 * 1000) },
    max_processes_per_session: { key: 'maxProcessesPerSession', read: positiveInt(1, 100_000) },
    max_detached_processes: { key: 'maxDetachedProcesses', read: positiveInt(1, 100_000) },
    detached_exited_retention_sec: {
      key: 'detachedExitedRetentionMs',
      read: nonNegativeInt(1000, 7 * 24 * 3600 * 1000),
    },
  },
  server: {
    max_message_bytes: { key: 'maxMessageBytes', read: positiveInt(1, 1024 ** 3) },
    ping_interval_sec: { key: 'pingIntervalMs', read: nonNegativeInt(1000, 3600 * 1000) },
    concurrent_requests: { key: 'concurrentRequests', read: positiveInt(1, 1024) },
  },
  filesystem: {
    max_read_file_bytes: { key: 'maxReadFileBytes', read: positiveInt(1, 2 ** 53 - 1) },
    max_open_files_per_connection: { key: 'maxFileHandles', read: positiveInt(1, 100_000) },
  },
  forward: {
    enabled: {
      key: 'forwardEnabled',
      read: (value) => (typeof value === 'boolean' ? value : new Invalid('must be a boolean')),
    },
    allow: { key: 'forwardAllow', read: readForwardAllow },
    max_connections_per_connection: { key: 'forwardMaxConnections', read: positiveInt(1, 100_000) },
  },
  environment: {
    prepend_path_dirs: { key: 'prependPathDirs', read: readAbsoluteDirs },
  },
  logging: {
    level: {
      key: 'logLevel',
      read: (value) =>
        typeof value === 'string' && LOG_LEVELS.includes(value)
          ? value
          : new Invalid(`must be one of ${LOG_LEVELS.join(', ')}`),
    },
  },
  recording: {
    dir: {
      key: 'recordDir',
      read: (value) =>
        typeof value === 'string' && value.startsWith('/') ? value : new Invalid('must be an absolute path'),
    },
    failure: {
      key: 'recordFailure',
      read: (value) => (value === 'open' || value === 'closed' ? value : new Invalid('must be "open" or "closed"')),
    },
    max_file_bytes: { key: 'recordMaxFileBytes', read: positiveInt(1, 2 ** 53 - 1) },
    max_file_age_sec: { key: 'recordMaxFileAgeMs', read: positiveInt(1000, 365 * 24 * 3600 * 1000) },
    queue_bytes: { key: 'recordQueueBytes', read: positiveInt(1, 1024 ** 3) },
  },
  // Codex's telemetry keys (`config.toml` in CODEX_HOME has the same shape).
  otel: {
    environment: {
      key: 'otelEnvironment',
      read: (value) => (typeof value === 'string' && value !== '' ? value : new Invalid('must be a non-empty string')),
    },
    metrics_exporter: { key: 'metricsExporter', read: readMetricsExporter },
  },
  analytics: {
    enabled: {
      key: 'analyticsEnabled',
      read: (value) => (typeof value === 'boolean' ? value : new Invalid('must be a boolean')),
    },
  },
};

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

export interface LoadedConfig {
  config: ExecutorConfig;
  /** Problems that were ignored (non-strict mode). */
  warnings: string[];
  /** The file that was read, or null when none exists. */
  path: string | null;
}

export function tetherHome(env: NodeJS.ProcessEnv = process.env): string {
  return env.TETHER_HOME ?? join(homedir(), '.tether');
}

export function defaultConfigPath(env: NodeJS.ProcessEnv = process.env): string {
  return join(tetherHome(env), 'config.toml');
}

/**
 * Loads the TOML config. A missing file at the default path means defaults; a missing file given
 * explicitly is an error. In strict mode every problem (syntax, unknown key, bad value) throws
 * ConfigError; otherwise problems are returned as warnings and the affected keys keep their defaults.
 */
export function loadConfig(options: { path?: string; explicit?: boolean; strict?: boolean }): LoadedConfig {
  const path = options.path ?? defaultConfigPath();
  const config: ExecutorConfig = { ...DEFAULT_CONFIG };
  const warnings: string[] = [];
  const problem = (text: string) => {
    if (options.strict) throw new ConfigError(`${path}: ${text}`);
    warnings.push(`${path}: ${text}`);
  };
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' && !options.explicit) return { config, warnings, path: null };
    throw new ConfigError(`cannot read config file ${path}: ${(err as Error).message}`);
  }
  let document: Record<string, unknown>;
  try {
    document = parseToml(text) as Record<string, unknown>;
  } catch (err) {
    problem(`invalid TOML: ${(err as Error).message.split('\n')[0]}`);
    return { config, warnings, path };
  }
  for (const [section, body] of Object.entries(document)) {
    // Own properties only: a section or key named like an Object.prototype member (`constructor`,
    // `toString`) is an unknown field, not a lookup on the prototype.
    const sectionSchema = Object.hasOwn(SCHEMA, section) ? SCHEMA[section] : undefined;
    if (!sectionSchema || typeof body !== 'object' || body === null || Array.isArray(body)) {
      problem(`unknown configuration field \`${section}\``);
      continue;
    }
    for (const [name, value] of Object.entries(body)) {
      const spec = Object.hasOwn(sectionSchema, name) ? sectionSchema[name] : undefined;
      if (!spec) {
        problem(`unknown configuration field \`${section}.${name}\``);
        continue;
      }
      const read = spec.read(value);
      if (read instanceof Invalid) {
        problem(`\`${section}.${name}\` ${read.error}`);
        continue;
      }
      (config as unknown as Record<string, unknown>)[spec.key] = read;
    }
  }
  return { config, warnings, path };
}
