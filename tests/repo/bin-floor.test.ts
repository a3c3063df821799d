/**
 * The four bins refuse a Node below Tether's floor (22.14) in one line that names the fix, before loading
 * anything that needs a newer one, and start on the floor itself. The Node version is set for the child by a
 * preload, as an older Node would report it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot, runToEnd } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';

const asNode = (version: string) =>
  `data:text/javascript,Object.defineProperty(process.versions,"node",{value:"${version}"})`;

describe.each(['executor', 'harness', 'registry', 'relay'])('%s bin on an old Node', (app) => {
  const bin = join(repoRoot(), 'apps', app, 'bin', `${app}.js`);

  it('below the floor: exit 1 and one line naming the floor and the fix', async () => {
    for (const version of ['20.20.2', '22.13.9']) {
      const run = await runToEnd(process.execPath, ['--import', asNode(version), bin, '--version']);
      expect(run.code).toBe(1);
      expect(run.stdout).toBe('');
      expect(run.stderr).toBe(
        `${app}: Node ${version} is below Tether's floor: install Node 22.14 or newer (in a checkout, \`node scripts/node-runtimes.mjs run 24 -- node apps/${app}/bin/${app}.js …\` runs it on a pinned Node 24 from the npm registry)\n`,
      );
    }
  });

  it('at the floor: it starts', async () => {
    const run = await runToEnd(process.execPath, ['--import', asNode('22.14.0'), bin, '--version']);
    const { version } = JSON.parse(readFileSync(join(repoRoot(), 'apps', app, 'package.json'), 'utf8'));
    expect({ code: run.code, stdout: run.stdout }).toEqual({ code: 0, stdout: `${version}\n` });
  });
});
