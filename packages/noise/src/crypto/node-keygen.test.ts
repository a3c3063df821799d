import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const provider = fileURLToPath(new URL('./node.ts', import.meta.url));

// Run in a child: a deadlock would block the test's own thread for good (no timeout could end it).
const script = `
import { createNodeProvider } from ${JSON.stringify(provider)};
const provider = createNodeProvider();
const junk = [];
for (let i = 0; i < 20000; i++) {
  provider.generateKeyPair();
  if (i % 10 === 0) junk.push(Buffer.alloc(1024).toString('hex'));
  if (junk.length > 2000) junk.length = 0;
}
console.log('done');
`;

describe('node provider key generation', () => {
  // On Node 20, generateKeyPairSync followed by an export of that key deadlocked within 2000 rounds in two
  // runs of three here (a GC finalizing the spent job during the export); 20000 rounds take about 1.5 s.
  it('makes 20000 key pairs under GC pressure without hanging', () => {
    const run = spawnSync(
      process.execPath,
      ['--conditions=tether-source', '--import', 'tsx', '--input-type=module', '-e', script],
      {
        encoding: 'utf8',
        timeout: 60_000,
        killSignal: 'SIGKILL',
      },
    );
    expect(run.signal, run.stderr).toBeNull();
    expect(run.stdout.trim()).toBe('done');
  }, 90_000);
});
