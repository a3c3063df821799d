// Benchmark: transport throughput vs raw AEAD, and handshake cost per side, per suite × provider.
// Run from packages/noise: node --conditions=tether-source --import tsx bench.ts
import { cpus } from 'node:os';
import {
  type CryptoProvider,
  createInitiator,
  createMlKem768,
  createNodeProvider,
  createPortableProvider,
  createResponder,
  defaultMlKemBackend,
  generateIdentity,
  type Kem,
  MAX_TRANSPORT_PLAINTEXT,
  SUITE_NAMES,
  type Suite,
  suiteInfo,
} from '@tether/noise';

const RECORD = MAX_TRANSPORT_PLAINTEXT; // 65 519 B: the largest plaintext one Noise message can carry
const TRANSPORT_SECONDS = 0.4;
const HANDSHAKE_SECONDS = 1.5;
const providers: Record<string, () => CryptoProvider> = { node: createNodeProvider, portable: createPortableProvider };
// node pairs with the default KEM (node:crypto's ML-KEM on Node 24, noble before); portable with pure-JS noble,
// as a browser would run.
const kems: Record<string, Kem> = { node: createMlKem768(), portable: createMlKem768({ backend: 'noble' }) };
let kem: Kem = kems.node!;
const prologue = new TextEncoder().encode('bench');

function handshake(suite: Suite, provider: CryptoProvider) {
  const harness = generateIdentity({ suite, provider, kem });
  const executor = generateIdentity({ suite, provider, kem });
  return { harness, executor };
}

/** Warms fn up for a fifth of the budget, then runs it for about `seconds`; returns iterations per second. */
function rate(seconds: number, fn: () => void): number {
  const warmUntil = process.hrtime.bigint() + BigInt(Math.round(seconds * 2e8));
  do fn();
  while (process.hrtime.bigint() < warmUntil);
  let count = 0;
  const start = process.hrtime.bigint();
  const budget = BigInt(Math.round(seconds * 1e9));
  let elapsed = 0n;
  while (elapsed < budget) {
    fn();
    count++;
    elapsed = process.hrtime.bigint() - start;
  }
  return count / (Number(elapsed) / 1e9);
}

const mbps = (perSecond: number) => (perSecond * RECORD) / 1e6;

const throughputRows: string[] = [];
const handshakeRows: string[] = [];

for (const suite of SUITE_NAMES) {
  const { cipher } = suiteInfo(suite);
  for (const [name, make] of Object.entries(providers)) {
    const provider = make();
    kem = kems[name]!;
    const { harness, executor } = handshake(suite, provider);

    // The two sides of one handshake between the harness and the executor.
    const initiate = () =>
      createInitiator({ suite, provider, kem, staticKeys: harness, remoteStatic: executor.publicKey, prologue });
    const respond = () => createResponder({ suite, provider, kem, staticKeys: executor, prologue });

    // Transport: encrypt on one side, decrypt on the other (implicit nonces, so decrypt follows encrypt).
    const initiator = initiate();
    const pending = respond().readMessage1(initiator.message1);
    const { message2, transport: responder } = pending.writeMessage2();
    const sender = initiator.readMessage2(message2);
    const plaintext = provider.randomBytes(RECORD);
    // Raw AEAD: the provider's primitive alone, seal + open of the same size.
    const key = provider.randomBytes(32);
    const nonce = new Uint8Array(12);
    const ad = new Uint8Array(0);
    // Alternate the two measurements and keep the best of three: this is a shared 2-core machine.
    let encryptRate = 0;
    let rawRate = 0;
    for (let round = 0; round < 3; round++) {
      encryptRate = Math.max(
        encryptRate,
        rate(TRANSPORT_SECONDS, () => {
          responder.decrypt(sender.encrypt(plaintext));
        }),
      );
      rawRate = Math.max(
        rawRate,
        rate(TRANSPORT_SECONDS, () => {
          provider.decrypt(cipher, key, nonce, ad, provider.encrypt(cipher, key, nonce, ad, plaintext));
        }),
      );
    }
    throughputRows.push(
      `| ${cipher} | ${name} | ${mbps(encryptRate).toFixed(0)} | ${mbps(rawRate).toFixed(0)} | ${((encryptRate / rawRate) * 100).toFixed(0)} % |`,
    );

    // Handshakes: CPU per side, measured separately, and full handshakes per second in one process.
    let initiatorCpu = 0;
    let responderCpu = 0;
    let count = 0;
    const full = rate(HANDSHAKE_SECONDS, () => {
      let t = process.cpuUsage();
      const i = initiate();
      initiatorCpu += cpuMs(t);
      t = process.cpuUsage();
      const p = respond().readMessage1(i.message1);
      const { message2: m2 } = p.writeMessage2();
      responderCpu += cpuMs(t);
      t = process.cpuUsage();
      i.readMessage2(m2);
      initiatorCpu += cpuMs(t);
      count++;
    });
    handshakeRows.push(
      `| ${cipher} | ${name} | ${full.toFixed(0)} | ${(initiatorCpu / count).toFixed(2)} | ${(responderCpu / count).toFixed(2)} |`,
    );
  }
}

function cpuMs(since: NodeJS.CpuUsage): number {
  const { user, system } = process.cpuUsage(since);
  return (user + system) / 1000;
}

console.log(
  `Node ${process.version}, ${cpus()[0]?.model ?? 'unknown CPU'} (${cpus().length} cores); ML-KEM-768: node rows ${defaultMlKemBackend()}, portable rows @noble/post-quantum.`,
);
console.log('');
console.log(
  `Transport: one ${RECORD}-byte record (the largest Noise plaintext) encrypted by one side and decrypted by the other.`,
);
console.log('');
console.log('| cipher | provider | transport MB/s | raw AEAD seal+open MB/s | transport / raw |');
console.log('|---|---|---:|---:|---:|');
for (const row of throughputRows) console.log(row);
console.log('');
console.log('Handshakes (hybrid IK, both sides in one process; CPU ms per handshake per side):');
console.log('');
console.log('| cipher | provider | handshakes/s | initiator CPU ms | responder CPU ms |');
console.log('|---|---|---:|---:|---:|');
for (const row of handshakeRows) console.log(row);
