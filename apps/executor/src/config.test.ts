import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError, DEFAULT_CONFIG, defaultConfigPath, loadConfig } from './config.js';

const dirs: string[] = [];
function file(text: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'tether-config-'));
  dirs.push(dir);
  const path = join(dir, 'config.toml');
  writeFileSync(path, text);
  return path;
}
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe('loadConfig', () => {
  it('uses defaults when the default file is absent', () => {
    const result = loadConfig({ path: '/nonexistent/tether/config.toml' });
    expect(result).toEqual({ config: DEFAULT_CONFIG, warnings: [], path: null });
  });

  it('fails when an explicitly named file is absent', () => {
    expect(() => loadConfig({ path: '/nonexistent/tether/config.toml', explicit: true })).toThrow(ConfigError);
  });

  it('reads every section with units converted', () => {
    const path = file(`
[sessions]
detached_ttl_sec = 5
max_sessions = 3
[processes]
retained_output_bytes_per_process = 4096
retained_output_chunks_per_process = 10
flow_output_budget_bytes = 8388608
exited_process_retention_sec = 0
max_processes_per_session = 7
max_detached_processes = 5
detached_exited_retention_sec = 60
[server]
max_message_bytes = 65536
ping_interval_sec = 0
concurrent_requests = 4
[filesystem]
max_read_file_bytes = 1024
max_open_files_per_connection = 16
[logging]
level = "debug"
[forward]
enabled = false
allow = ["loopback", "10.0.0.0/8:5432"]
max_connections_per_connection = 4
[environment]
prepend_path_dirs = ["/opt/tools/bin"]
[recording]
dir = "/var/lib/tether/recordings"
failure = "closed"
max_file_bytes = 1048576
max_file_age_sec = 3600
queue_bytes = 65536
`);
    expect(loadConfig({ path, strict: true }).config).toEqual({
      detachedTtlMs: 5000,
      maxSessions: 3,
      retainedOutputBytes: 4096,
      retainedOutputChunks: 10,
      flowOutputBudgetBytes: 8388608,
      exitedRetentionMs: 0,
      maxProcessesPerSession: 7,
      maxDetachedProcesses: 5,
      detachedExitedRetentionMs: 60_000,
      maxMessageBytes: 65536,
      pingIntervalMs: 0,
      concurrentRequests: 4,
      logLevel: 'debug',
      maxReadFileBytes: 1024,
      maxFileHandles: 16,
      otelEnvironment: 'dev',
      metricsExporter: null,
      analyticsEnabled: true,
      forwardEnabled: false,
      forwardAllow: ['loopback', '10.0.0.0/8:5432'],
      forwardMaxConnections: 4,
      prependPathDirs: ['/opt/tools/bin'],
      recordDir: '/var/lib/tether/recordings',
      recordFailure: 'closed',
      recordMaxFileBytes: 1_048_576,
      recordMaxFileAgeMs: 3_600_000,
      recordQueueBytes: 65_536,
    });
  });

  it('refuses a recording dir that is not absolute and a failure policy that is neither open nor closed', () => {
    expect(() => loadConfig({ path: file('[recording]\ndir = "rec"\n'), strict: true })).toThrow(/dir.*absolute path/);
    expect(() => loadConfig({ path: file('[recording]\nfailure = "maybe"\n'), strict: true })).toThrow(
      /failure.*"open" or "closed"/,
    );
  });

  it('refuses prepend_path_dirs that are not absolute paths', () => {
    const path = file('[environment]\nprepend_path_dirs = ["bin"]\n');
    expect(() => loadConfig({ path, strict: true })).toThrow(/prepend_path_dirs.*absolute paths/);
  });

  it('refuses keys named like Object.prototype members as unknown fields, not with a TypeError (found by fuzzing)', () => {
    const path = file('[sessions]\nconstructor = 1\n[processes]\ntoString = 2\n[hasOwnProperty]\nx = 1\n');
    expect(loadConfig({ path }).warnings).toEqual([
      `${path}: unknown configuration field \`sessions.constructor\``,
      `${path}: unknown configuration field \`processes.toString\``,
      `${path}: unknown configuration field \`hasOwnProperty\``,
    ]);
    expect(() => loadConfig({ path, strict: true })).toThrow(ConfigError);
  });

  it('rejects unknown keys only in strict mode', () => {
    const path = file('[sessions]\ndetached_ttl_sec = 5\nbogus = 1\n[nope]\nx = 1\n');
    expect(() => loadConfig({ path, strict: true })).toThrow('unknown configuration field `sessions.bogus`');
    const lenient = loadConfig({ path });
    expect(lenient.config.detachedTtlMs).toBe(5000);
    expect(lenient.warnings).toEqual([
      `${path}: unknown configuration field \`sessions.bogus\``,
      `${path}: unknown configuration field \`nope\``,
    ]);
  });

  it('rejects invalid values and syntax in strict mode, keeps defaults otherwise', () => {
    const bad = file('[sessions]\ndetached_ttl_sec = -1\n');
    expect(() => loadConfig({ path: bad, strict: true })).toThrow('`sessions.detached_ttl_sec` must be an integer');
    expect(loadConfig({ path: bad }).config.detachedTtlMs).toBe(DEFAULT_CONFIG.detachedTtlMs);
    const broken = file('[sessions\n');
    expect(() => loadConfig({ path: broken, strict: true })).toThrow(/invalid TOML/);
    expect(loadConfig({ path: broken }).warnings).toHaveLength(1);
  });

  it('finds the default file under TETHER_HOME', () => {
    expect(defaultConfigPath({ TETHER_HOME: '/srv/tether' })).toBe('/srv/tether/config.toml');
  });
});

describe('telemetry keys (Codex config.toml shape)', () => {
  it('accepts [analytics] and [otel] with an otlp-http metrics exporter in strict mode', () => {
    const path = file(`
[analytics]
enabled = false

[otel]
environment = "test"
metrics_exporter = { otlp-http = { endpoint = "http://127.0.0.1:4318/v1/metrics", protocol = "json", headers = { "x-team" = "exec" } } }
`);
    const { config, warnings } = loadConfig({ path, strict: true });
    expect(warnings).toEqual([]);
    expect(config.otelEnvironment).toBe('test');
    expect(config.analyticsEnabled).toBe(false);
    expect(config.metricsExporter).toEqual({
      endpoint: 'http://127.0.0.1:4318/v1/metrics',
      protocol: 'json',
      headers: { 'x-team': 'exec' },
    });
  });

  it('defaults: no exporter, environment dev', () => {
    expect(DEFAULT_CONFIG.metricsExporter).toBeNull();
    expect(DEFAULT_CONFIG.otelEnvironment).toBe('dev');
    const path = file('[otel]\nmetrics_exporter = "none"\n');
    expect(loadConfig({ path, strict: true }).config.metricsExporter).toBeNull();
  });

  it.each([
    ['{ otlp-http = { endpoint = "http://127.0.0.1:1/v1/metrics" } }', 'missing field `otlp-http.protocol`'],
    ['{ otlp-http = { endpoint = "http://127.0.0.1:1/v1/metrics", protocol = "xml" } }', 'expected `binary` or `json`'],
    ['{ otlp-http = { endpoint = "ftp://host/v1/metrics", protocol = "json" } }', 'must be an http(s) URL'],
    [
      '{ otlp-http = { endpoint = "http://h/v1/metrics", protocol = "json", extra = 1 } }',
      'unknown field `otlp-http.extra`',
    ],
    ['{ otlp-grpc = { endpoint = "http://127.0.0.1:1" } }', 'otlp-grpc is not supported by this executor'],
    ['"statsig"', '`statsig` is not supported by this executor'],
  ])('metrics_exporter = %s is refused in strict mode', (value, message) => {
    const path = file(`[otel]\nmetrics_exporter = ${value}\n`);
    expect(() => loadConfig({ path, strict: true })).toThrow(message);
    const lenient = loadConfig({ path });
    expect(lenient.config.metricsExporter).toBeNull();
    expect(lenient.warnings.join('\n')).toContain(message);
  });

  it('analytics.enabled must be a boolean (as codex: "yes" is an error)', () => {
    const path = file('[analytics]\nenabled = "yes"\n');
    expect(() => loadConfig({ path, strict: true })).toThrow('`analytics.enabled` must be a boolean');
  });

  it('unknown [otel] keys are still unknown', () => {
    const path = file('[otel]\nfrobnicate = 1\n');
    expect(() => loadConfig({ path, strict: true })).toThrow('unknown configuration field `otel.frobnicate`');
  });
});
