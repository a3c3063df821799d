import { defineConfig, mergeConfig } from 'vitest/config';
import shared from '../vitest.shared.ts';

const scale = Number(process.env.RELIABILITY_SCALE ?? 1) || 1;

/**
 * `pnpm test:reliability`: the real registry, relay and executor under load, chaos and kills. Kept out of the
 * ordinary `vitest run` (tests/vitest.config.ts excludes reliability/**) so CI runs it once, on its own line.
 */
export default mergeConfig(
  shared,
  defineConfig({
    environments: { __vitest__: { resolve: { conditions: ['tether-source'] } } },
    test: {
      include: ['reliability/**/*.test.ts'],
      exclude: ['node_modules/**'],
      // One stack at a time on a 2-core box: the figures (MB/s, RSS) mean something only alone.
      fileParallelism: false,
      // Each test states its own bound; these only catch a test that forgot to.
      testTimeout: 180_000 * scale,
      hookTimeout: 60_000 * scale,
      globalSetup: ['./reliability/global-setup.ts'],
    },
  }),
);
