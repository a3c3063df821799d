import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const provider = fileURLToPath(new URL('./node.ts', import.meta.url));
const kemModule = fileURLToPath(new URL('../kem/ml-kem-768.ts', import.meta.url));

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

  // The node ML-KEM backend (Node 24) makes its keys from seeds rather than generateKeyPairSync, so no key
  // generation job exists to deadlock with an export; this holds it to that under the same GC pressure.
  it('makes ML-KEM-768 key pairs (static and ephemeral) under GC pressure without hanging', () => {
    const kemScript = `
import { createMlKem768, defaultMlKemBackend } from ${JSON.stringify(kemModule)};
const kem = createMlKem768();
const rounds = defaultMlKemBackend() === 'node' ? 10000 : 200;
const junk = [];
for (let i = 0; i < rounds; i++) {
  const ephemeral = kem.generateEphemeral();
  const sent = kem.encapsulate(ephemeral.publicKey);
  if (ephemeral.decapsulate(sent.ciphertext).length !== 32) throw new Error('bad secret');
  if (i % 50 === 0) kem.generateKeyPair().secretKey;
  if (i % 10 === 0) junk.push(Buffer.alloc(1024).toString('hex'));
  if (junk.length > 2000) junk.length = 0;
}
console.log('done');
`;
    const run = spawnSync(
      process.execPath,
      ['--conditions=tether-source', '--import', 'tsx', '--input-type=module', '-e', kemScript],
      { encoding: 'utf8', timeout: 60_000, killSignal: 'SIGKILL' },
    );
    expect(run.signal, run.stderr).toBeNull();
    expect(run.stdout.trim()).toBe('done');
  }, 90_000);
});
