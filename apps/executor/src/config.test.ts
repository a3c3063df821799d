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
exited_process_retention_sec = 0
max_processes_per_session = 7
[server]
max_message_bytes = 65536
ping_interval_sec = 0
concurrent_requests = 4
[filesystem]
max_read_file_bytes = 1024
max_open_files_per_connection = 16
[logging]
level = "debug"
`);
    expect(loadConfig({ path, strict: true }).config).toEqual({
      detachedTtlMs: 5000,
      maxSessions: 3,
      retainedOutputBytes: 4096,
      retainedOutputChunks: 10,
      exitedRetentionMs: 0,
      maxProcessesPerSession: 7,
      maxMessageBytes: 65536,
      pingIntervalMs: 0,
      concurrentRequests: 4,
      logLevel: 'debug',
      maxReadFileBytes: 1024,
      maxFileHandles: 16,
    });
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
