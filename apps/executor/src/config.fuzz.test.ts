import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { stringify } from 'smol-toml';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, DEFAULT_CONFIG, loadConfig } from './config.js';

// The executor's TOML config against hostile or mistaken files (issue 16): any text and any typed value
// gives a config of the right shape plus warnings (or, in strict mode, a ConfigError), never a crash.
// Runs per property: TETHER_FUZZ_RUNS (`pnpm fuzz` raises it); a failure prints the seed to replay it.
const numRuns = Number(process.env.TETHER_FUZZ_RUNS) || 300;
// TETHER_FUZZ_SEED replays a failure's printed seed.
if (process.env.TETHER_FUZZ_SEED) fc.configureGlobal({ seed: Number(process.env.TETHER_FUZZ_SEED) });

const dir = mkdtempSync(join(tmpdir(), 'executor-config-fuzz-'));
const path = join(dir, 'config.toml');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const SECTIONS: Record<string, string[]> = {
  sessions: ['detached_ttl_sec', 'max_sessions'],
  processes: [
    'retained_output_bytes_per_process',
    'retained_output_chunks_per_process',
    'flow_output_budget_bytes',
    'exited_process_retention_sec',
    'max_processes_per_session',
  ],
  server: ['max_message_bytes', 'ping_interval_sec', 'concurrent_requests'],
  filesystem: ['max_read_file_bytes', 'max_open_files_per_connection'],
  logging: ['level'],
  otel: ['environment', 'metrics_exporter'],
  analytics: ['enabled'],
};

const name = fc.oneof(
  fc.constantFrom(...Object.keys(SECTIONS), ...Object.values(SECTIONS).flat()),
  // Names every object has (`constructor`, `toString`): they once crashed the loader.
  fc.constantFrom(...Object.getOwnPropertyNames(Object.prototype)),
  fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_-]{0,10}$/),
);

/** TOML values of every kind, including numbers at and past each limit and dates. */
const tomlValue: fc.Arbitrary<unknown> = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    fc.integer(),
    fc.constantFrom(0, -1, 1, 24 * 3600, 24 * 3600 + 1, 2 ** 31, 2 ** 53 - 1, 1024 ** 3, 1024 ** 3 + 1),
    fc.double({ noNaN: false }),
    fc.boolean(),
    fc.string({ maxLength: 12 }),
    fc.constantFrom('info', 'trace', 'none', 'json', 'binary', 'http://127.0.0.1:4318', 'ftp://x', ''),
    fc.date({ noInvalidDate: true }),
    fc.array(tie('value'), { maxLength: 3 }),
    fc.dictionary(fc.oneof(name, fc.constantFrom('otlp-http', 'endpoint', 'protocol', 'headers')), tie('value'), {
      maxKeys: 3,
    }),
  ),
})).value;

/** Documents built from the real sections and keys with values of every type, serialized as TOML. */
const typedDocument = fc
  .dictionary(name, fc.oneof(fc.dictionary(name, tomlValue, { maxKeys: 4 }), tomlValue), { maxKeys: 4 })
  .map((doc) => {
    try {
      return stringify(doc);
    } catch {
      return ''; // a value TOML cannot hold (a NaN in an array, say): an empty file
    }
  });

/** TOML-ish text: real lines and near misses, cut and joined anywhere. */
const tomlishText = fc
  .array(
    fc.oneof(
      name.map((n) => `[${n}]`),
      fc.tuple(name, fc.string({ unit: 'binary-ascii', maxLength: 12 })).map(([k, v]) => `${k} = ${v}`),
      fc.constantFrom('[[sessions]]', '[sessions', 'x = ', '= 1', '"a" = 1', 'a.b.c = 1', '[a.b]', '# c', '\u0000'),
      fc.string({ unit: 'binary', maxLength: 16 }),
    ),
    { maxLength: 8 },
  )
  .map((lines) => lines.join('\n'));

/** Every config field keeps the default's type (and numbers stay positive or zero, finite integers). */
function expectWellShaped(config: typeof DEFAULT_CONFIG): void {
  for (const [key, value] of Object.entries(DEFAULT_CONFIG)) {
    const got = (config as unknown as Record<string, unknown>)[key];
    if (value === null) continue; // metricsExporter: null or an object
    expect(typeof got, key).toBe(typeof value);
    if (typeof value === 'number') {
      expect(Number.isSafeInteger(got), key).toBe(true);
      expect(got as number, key).toBeGreaterThanOrEqual(0);
    }
  }
}

function checkFile(text: string): void {
  writeFileSync(path, text);
  const loose = loadConfig({ path, explicit: true });
  expectWellShaped(loose.config);
  for (const warning of loose.warnings) expect(warning.startsWith(`${path}: `)).toBe(true);
  try {
    const strict = loadConfig({ path, explicit: true, strict: true });
    expect(loose.warnings).toEqual([]);
    expect(strict.config).toEqual(loose.config);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    expect(loose.warnings.length).toBeGreaterThan(0);
    expect((error as ConfigError).message).toBe(loose.warnings[0]);
  }
}

describe('fuzz: executor TOML config', () => {
  it('any TOML-ish text loads to a well-shaped config with warnings, or a ConfigError in strict mode', () => {
    fc.assert(fc.property(tomlishText, checkFile), { numRuns });
  });

  it('any typed values under the real sections and keys are taken, or refused with a warning naming the key', () => {
    fc.assert(fc.property(typedDocument, checkFile), { numRuns });
  });
});
