import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { PROVIDERS, runHybrid, seededRandom, toHex } from './__tests__/helpers.js';
import { generateIdentity } from './identity.js';
import { createMlKem768 } from './kem/ml-kem-768.js';
import { SUITE_HYBRID_AESGCM, SUITE_HYBRID_CHACHAPOLY, type Suite } from './suite.js';

const provider = PROVIDERS.node!(seededRandom('property'));
const kem = createMlKem768({ randomBytes: seededRandom('property-kem') });
const harness = generateIdentity({ provider, kem });
const executor = generateIdentity({ provider, kem });

describe('property: arbitrary payloads survive a handshake and the transport', () => {
  it('round-trips the authorization payload and interleaved records in both directions', () => {
    fc.assert(
      fc.property(
        fc.constantFrom<Suite>(SUITE_HYBRID_AESGCM, SUITE_HYBRID_CHACHAPOLY),
        fc.constantFrom('node', 'portable'),
        fc.uint8Array({ maxLength: 4096 }),
        fc.array(fc.tuple(fc.boolean(), fc.uint8Array({ maxLength: 2048 })), { maxLength: 12 }),
        (suite, responderProvider, payload, records) => {
          const run = runHybrid({
            suite,
            initiatorProvider: provider,
            responderProvider: PROVIDERS[responderProvider]!(),
            initiatorKem: kem,
            responderKem: createMlKem768(),
            initiatorKeys: harness,
            responderKeys: executor,
            payload,
          });
          expect(toHex(run.pending.payload)).toBe(toHex(payload));
          for (const [fromInitiator, plaintext] of records) {
            const [sender, receiver] = fromInitiator
              ? [run.initiatorTransport, run.responderTransport]
              : [run.responderTransport, run.initiatorTransport];
            const ciphertext = sender.encrypt(plaintext);
            expect(ciphertext.length).toBe(plaintext.length + 16);
            expect(toHex(receiver.decrypt(ciphertext))).toBe(toHex(plaintext));
          }
          const sent = records.filter(([fromInitiator]) => fromInitiator).length;
          expect(run.initiatorTransport.sendNonce).toBe(BigInt(sent));
          expect(run.responderTransport.recvNonce).toBe(BigInt(sent));
          expect(run.initiatorTransport.recvNonce).toBe(BigInt(records.length - sent));
        },
      ),
      { numRuns: 40 },
    );
  });
});
