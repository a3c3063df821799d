import { describe, expect, it } from 'vitest';
import fixture from './__fixtures__/hybrid-ik-vectors.json' with { type: 'json' };
import { hex, PROVIDER_NAMES, PROVIDERS, runHybrid, scriptedRandom, toHex } from './__tests__/helpers.js';
import { createMlKem768 } from './kem/ml-kem-768.js';
import { type Suite, suiteInfo } from './suite.js';

// Our own seeded vectors (see the fixture header): every provider pairing, including the cross-provider
// ones (initiator on node, responder on portable and vice versa), must reproduce the same bytes.
const pairings = PROVIDER_NAMES.flatMap((initiator) => PROVIDER_NAMES.map((responder) => ({ initiator, responder })));
const cases = fixture.vectors.flatMap((vector) => pairings.map((pairing) => ({ ...pairing, vector })));

describe.each(cases)(
  '$vector.suite: initiator on $initiator, responder on $responder',
  ({ initiator, responder, vector }) => {
    it('reproduces message bytes, handshake hash, split keys and transport records', () => {
      const suite = vector.suite as Suite;
      expect(suiteInfo(suite).protocolName).toBe(vector.protocol_name);
      const keys = (provider: string, x25519: string, mlkemSeed: string) => {
        const secretKey = hex(x25519);
        return {
          x25519: { secretKey, publicKey: PROVIDERS[provider]!().publicKeyFromSecret(secretKey) },
          mlkem768: createMlKem768(scriptedRandom([mlkemSeed])).generateKeyPair(),
        };
      };
      const initiatorRandom = scriptedRandom(vector.initiator_random);
      const responderRandom = scriptedRandom(vector.responder_random);
      const run = runHybrid({
        suite,
        initiatorProvider: PROVIDERS[initiator]!(initiatorRandom.randomBytes),
        responderProvider: PROVIDERS[responder]!(responderRandom.randomBytes),
        initiatorKem: createMlKem768(initiatorRandom),
        responderKem: createMlKem768(responderRandom),
        initiatorKeys: keys(initiator, vector.initiator_static_x25519, vector.initiator_static_mlkem768_seed),
        responderKeys: keys(responder, vector.responder_static_x25519, vector.responder_static_mlkem768_seed),
        prologue: hex(vector.prologue),
        payload: hex(vector.payload),
      });

      expect(toHex(run.message1)).toBe(vector.message1);
      expect(toHex(run.message2)).toBe(vector.message2);
      expect(run.message1.length).toBe(3568 + vector.payload.length / 2);
      expect(run.message2.length).toBe(3424);
      expect(toHex(run.pending.payload)).toBe(vector.payload);
      expect(initiatorRandom.left()).toBe(0);
      expect(responderRandom.left()).toBe(0);

      expect(toHex(run.initiatorTransport.handshakeHash)).toBe(vector.handshake_hash);
      expect(toHex(run.responderTransport.handshakeHash)).toBe(vector.handshake_hash);
      const [iSend, iRecv] = run.initiatorTransport.keysForTesting();
      const [rSend, rRecv] = run.responderTransport.keysForTesting();
      expect([toHex(iSend), toHex(iRecv)]).toEqual([vector.k1, vector.k2]);
      expect([toHex(rRecv), toHex(rSend)]).toEqual([vector.k1, vector.k2]);

      for (const record of vector.transport) {
        const [sender, receiver] =
          record.from === 'initiator'
            ? [run.initiatorTransport, run.responderTransport]
            : [run.responderTransport, run.initiatorTransport];
        const ciphertext = sender.encrypt(hex(record.plaintext));
        expect(toHex(ciphertext)).toBe(record.ciphertext);
        expect(toHex(receiver.decrypt(ciphertext))).toBe(record.plaintext);
      }
    });
  },
);

describe('hybrid vector fixture', () => {
  it('covers both suites and freezes the protocol names hashed at init', () => {
    expect(fixture.vectors.map((v) => [v.suite, v.protocol_name])).toEqual([
      ['Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256', 'Noise_hybridIK_25519+MLKEM768_AESGCM_SHA256'],
      ['Noise_hybridIK_X25519+MLKEM768_ChaChaPoly_SHA256', 'Noise_hybridIK_25519+MLKEM768_ChaChaPoly_SHA256'],
    ]);
  });
});
