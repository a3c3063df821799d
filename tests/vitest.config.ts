import { defineConfig, mergeConfig } from 'vitest/config';
import shared from '../vitest.shared.ts';

export default mergeConfig(
  shared,
  defineConfig({
    test: {
      include: ['**/*.test.ts'],
      exclude: ['node_modules/**'],
      // Black-box tests start real executors (ours and codex); run files one at a time on 2 cores.
      fileParallelism: false,
      testTimeout: 30_000,
    },
  }),
);
