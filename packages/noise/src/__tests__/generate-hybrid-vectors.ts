// Writes src/__fixtures__/hybrid-ik-vectors.json with the node provider and seeded randomness.
// Run from packages/noise: node --conditions=tether-source --import tsx src/__tests__/generate-hybrid-vectors.ts
// See the fixture header for when regenerating is allowed.
import { writeFileSync } from 'node:fs';
import { createNodeProvider } from '../crypto/node.js';
import { createMlKem768 } from '../kem/ml-kem-768.js';
import { buildRelayPrologue } from '../prologue.js';
import { SUITE_NAMES, suiteInfo } from '../suite.js';
import { recordingRandom, runHybrid, seededRandom, toHex } from './helpers.js';

const HEADER =
  'Seeded-randomness vectors for the hybrid IK suites, generated once with the node provider by ' +
  'src/__tests__/generate-hybrid-vectors.ts on 2026-11-29. They freeze our own wire bytes, key schedule and ' +
  'split keys so any change is visible; they were NOT produced by Codex/Clatter. Regenerate only when the ' +
  'wire format changes on purpose (e.g. a token-order fix confirmed against the real codex binary), never to ' +
  'make a failing test pass. *_random lists every random draw of that side in consumption order ' +
  '(message 1: skem encapsulation m, e X25519 secret, e ML-KEM keygen seed d||z; message 2: ekem m, skem m, ' +
  'e X25519 secret, e ML-KEM seed). Transport records alternate initiator (k1) and responder (k2).';

const vectors = SUITE_NAMES.map((suite) => {
  const tag = suiteInfo(suite).cipher;
  const staticRandom = seededRandom(`hybrid-vectors/${tag}/static`);
  const initiatorStatic = { x25519: staticRandom(32), mlkemSeed: staticRandom(64) };
  const responderStatic = { x25519: staticRandom(32), mlkemSeed: staticRandom(64) };
  const keys = (s: { x25519: Uint8Array; mlkemSeed: Uint8Array }) => ({
    x25519: { secretKey: s.x25519, publicKey: createNodeProvider().publicKeyFromSecret(s.x25519) },
    mlkem768: createMlKem768({ randomBytes: () => s.mlkemSeed }).generateKeyPair(),
  });
  const initiatorRandom = recordingRandom(seededRandom(`hybrid-vectors/${tag}/initiator`));
  const responderRandom = recordingRandom(seededRandom(`hybrid-vectors/${tag}/responder`));
  const prologue = buildRelayPrologue({
    environmentId: 'env-1',
    registrationId: 'registration-1',
    streamId: 'stream-1',
  });
  const payload = new TextEncoder().encode('{"harness_key_authorization":"vector"}');
  const run = runHybrid({
    suite,
    initiatorProvider: createNodeProvider(initiatorRandom),
    responderProvider: createNodeProvider(responderRandom),
    initiatorKem: createMlKem768(initiatorRandom),
    responderKem: createMlKem768(responderRandom),
    initiatorKeys: keys(initiatorStatic),
    responderKeys: keys(responderStatic),
    prologue,
    payload,
  });
  const [k1, k2] = run.initiatorTransport.keysForTesting();
  const transport = ['{"id":1,"method":"initialize"}', '{"id":1,"result":{}}', '', 'third'].map((text, index) => {
    const plaintext = new TextEncoder().encode(text);
    const from = index % 2 === 0 ? 'initiator' : 'responder';
    const sender = from === 'initiator' ? run.initiatorTransport : run.responderTransport;
    return { from, plaintext: toHex(plaintext), ciphertext: toHex(sender.encrypt(plaintext)) };
  });
  return {
    suite,
    protocol_name: suiteInfo(suite).protocolName,
    prologue: toHex(prologue),
    payload: toHex(payload),
    initiator_static_x25519: toHex(initiatorStatic.x25519),
    initiator_static_mlkem768_seed: toHex(initiatorStatic.mlkemSeed),
    responder_static_x25519: toHex(responderStatic.x25519),
    responder_static_mlkem768_seed: toHex(responderStatic.mlkemSeed),
    initiator_random: initiatorRandom.draws,
    responder_random: responderRandom.draws,
    message1: toHex(run.message1),
    message2: toHex(run.message2),
    handshake_hash: toHex(run.initiatorTransport.handshakeHash),
    k1: toHex(k1),
    k2: toHex(k2),
    transport,
  };
});

const target = new URL('../__fixtures__/hybrid-ik-vectors.json', import.meta.url);
writeFileSync(target, `${JSON.stringify({ header: HEADER, vectors }, null, 2)}\n`);
console.log(`wrote ${vectors.length} vectors to ${target.pathname}`);
