import { defineConfig } from 'vitest/config';

// Workspace packages export their TypeScript sources under the `tether-source` condition, so tests
// run against sources without a build step; `dist/` is what the published bins use.
export default defineConfig({
  resolve: { conditions: ['tether-source'] },
  ssr: { resolve: { conditions: ['tether-source'] } },
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 20_000,
    hookTimeout: 20_000,
    pool: 'forks',
  },
});
