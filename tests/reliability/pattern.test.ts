/**
 * The generator every other file trusts: awk, run here, prints exactly the bytes the test computes, paced
 * or not; and the streaming verifier finds lost, repeated and foreign bytes and says where.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  PatternVerifier,
  patternBytes,
  patternCommand,
  patternDivergence,
  patternRecord,
  patternSha256,
} from '@tether/test-kit';
import { describe, expect, it } from 'vitest';

function runLocally(argv: string[]): Buffer {
  const result = spawnSync(argv[0] as string, argv.slice(1), { maxBuffer: 64 * 1024 * 1024, timeout: 30_000 });
  if (result.status !== 0) throw new Error(`${argv[0]} exited ${result.status}: ${result.stderr}`);
  return result.stdout;
}

describe('position-coded pattern', () => {
  it('records are 16 bytes and name their own offset', () => {
    expect(patternRecord('AB12', 0)).toBe('AB12 0000000000\n');
    expect(patternRecord('AB12', 16_777_200)).toBe('AB12 0016777200\n');
    expect(patternBytes('AB12', 48, 32).toString()).toBe(
      patternRecord('AB12', 32) + patternRecord('AB12', 48) + patternRecord('AB12', 64),
    );
    expect(() => patternBytes('AB1', 16)).toThrow();
    expect(() => patternBytes('AB12', 17)).toThrow();
  });

  it('awk prints exactly the pattern (16 MiB), and its sha256 is patternSha256', () => {
    const bytes = 16 * 1024 * 1024;
    const printed = runLocally(patternCommand('Q7ZZ', bytes));
    expect(printed.byteLength).toBe(bytes);
    expect(patternDivergence('Q7ZZ', bytes, printed)).toBeNull();
    expect(createHash('sha256').update(printed).digest('hex')).toBe(patternSha256('Q7ZZ', bytes));
    expect(printed.subarray(0, 64).equals(patternBytes('Q7ZZ', 64))).toBe(true);
  });

  it('a paced awk prints the same bytes, more slowly', () => {
    const bytes = 256 * 1024;
    const started = Date.now();
    const printed = runLocally(patternCommand('PACE', bytes, { pace: { everyBytes: 64 * 1024, sleepSeconds: 0.1 } }));
    expect(Date.now() - started).toBeGreaterThanOrEqual(350);
    expect(printed.equals(patternBytes('PACE', bytes))).toBe(true);
  });

  it('the verifier accepts the exact stream in any chunking and locates a lost, repeated or foreign range', () => {
    const bytes = 1024 * 1024;
    const data = patternBytes('VVVV', bytes);
    const feed = (parts: Buffer[]) => {
      const verifier = new PatternVerifier('VVVV', bytes);
      for (const part of parts) verifier.update(part);
      return verifier.finish();
    };
    const cuts = [0, 7, 4096, 65_543, 300_001, bytes];
    const chunked = cuts.slice(1).map((end, i) => data.subarray(cuts[i], end));
    expect(feed(chunked).problem).toBeNull();

    const lost = feed([data.subarray(0, 65_536), data.subarray(131_072)]);
    expect(lost.problem).toContain('at byte 65536');
    const repeated = feed([data.subarray(0, 65_536), data.subarray(32_768)]);
    expect(repeated.problem).toContain('at byte 65536');
    const foreign = feed([data.subarray(0, 65_536), patternBytes('XXXX', bytes - 65_536, 65_536)]);
    expect(foreign.problem).toContain('"XXXX 0000065536');
    const short = feed([data.subarray(0, bytes - 16)]);
    expect(short.problem).toContain(`${bytes - 16} bytes arrived`);
    const flipped = Buffer.from(data);
    flipped[100_005] = 0x21;
    expect(feed([flipped]).problem).toContain('sha256 differs');
  });
});
