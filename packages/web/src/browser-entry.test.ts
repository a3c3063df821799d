import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { describe, expect, it } from 'vitest';
import { isNodeOnly, nodeOnlyGuard } from '../scripts/node-only.mjs';

const here = fileURLToPath(new URL('.', import.meta.url));

/** Bundles `entry` for a browser as scripts/build.mjs does (in memory): the guard's errors, or none. */
async function nodeOnlyImports(entry: string): Promise<string[]> {
  const result = await build({
    stdin: { contents: `export * from '${entry}';`, resolveDir: here, loader: 'ts' },
    bundle: true,
    write: false,
    platform: 'browser',
    format: 'esm',
    conditions: ['tether-source'],
    plugins: [nodeOnlyGuard()],
    logLevel: 'silent',
  }).then(
    () => [],
    (err: { errors: { text: string }[] }) => err.errors.map((e) => e.text),
  );
  return result;
}

describe("the page's import graph", () => {
  it('of the client SDK (@tether/client/browser) has no Node-only module', async () => {
    expect(await nodeOnlyImports('@tether/client/browser')).toEqual([]);
  });

  it('of the page itself (app.ts, which build.mjs bundles) has none either', async () => {
    expect(await nodeOnlyImports('./app.ts')).toEqual([]);
  });

  it("is checked: the client's Node entry is refused, naming what it imports and from where", async () => {
    const errors = await nodeOnlyImports('@tether/client');
    expect(errors.length).toBeGreaterThan(0);
    expect(errors).toContainEqual(
      expect.stringMatching(/^@tether\/local-process \(from .*local-backend\.ts\) is Node-only/),
    );
  });

  it.each([
    ['node:crypto', true],
    ['ws', true],
    ['@tether/native-crypto', true],
    ['@tether/outbound', true],
    ['@tether/user-read/websocket', true],
    ['buffer', false],
    ['@tether/noise', false],
    ['@tether/client/browser', false],
  ])('counts %s as Node-only: %s', (specifier, nodeOnly) => {
    expect(isNodeOnly(specifier)).toBe(nodeOnly);
  });
});
