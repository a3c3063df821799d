import { defineConfig, mergeConfig } from 'vitest/config';
import shared from '../vitest.shared.ts';

export default mergeConfig(
  shared,
  defineConfig({
    // globalSetup files run in vitest's own `__vitest__` environment; give it the source condition too.
    environments: { __vitest__: { resolve: { conditions: ['tether-source'] } } },
    test: {
      include: ['**/*.test.ts'],
      // reliability/ has its own config and script (`test:reliability`), so it is not run twice.
      exclude: ['node_modules/**', 'reliability/**'],
      // Black-box tests start real executors (ours and codex) and mostly wait on them: three files at a time on
      // two cores. `npm test` (scripts/test.mjs) runs the files that bound throughput or memory alone
      // (`--no-file-parallelism`), after the others.
      maxWorkers: 3,
      testTimeout: 30_000,
      // Gives every run a peer marker and scratch root, and fails the run if any peer or child survives it.
      globalSetup: ['./conformance/global-setup.ts'],
    },
  }),
);
