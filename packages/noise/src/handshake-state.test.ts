import { describe, expect, it } from 'vitest';
import { PROVIDERS, seededRandom } from './__tests__/helpers.js';
import { ClassicIKHandshake, HybridIKHandshake } from './handshake-state.js';
import { createMlKem768 } from './kem/ml-kem-768.js';
import { PROTOCOL_NAME_CLASSIC_IK, PROTOCOL_NAME_HYBRID_AESGCM } from './suite.js';

const provider = PROVIDERS.node!(seededRandom('handshake-state'));
const kem = createMlKem768({ randomBytes: seededRandom('handshake-state-kem') });
const code = (code: string) => expect.objectContaining({ name: 'NoiseError', code });
const prologue = new Uint8Array(0);

function classicPair() {
  const responderStatic = provider.generateKeyPair();
  const common = { provider, cipher: 'ChaChaPoly' as const, protocolName: PROTOCOL_NAME_CLASSIC_IK, prologue };
  return {
    initiator: new ClassicIKHandshake({
      ...common,
      role: 'initiator',
      s: provider.generateKeyPair(),
      rs: responderStatic.publicKey,
    }),
    responder: new ClassicIKHandshake({ ...common, role: 'responder', s: responderStatic }),
  };
}

describe('HandshakeState step machine', () => {
  it('walks message1 → message2 → split → done and splits only once', () => {
    const { initiator, responder } = classicPair();
    expect(initiator.step).toBe('message1');
    responder.readMessage1(initiator.writeMessage1(new Uint8Array(0)));
    expect([initiator.step, responder.step]).toEqual(['message2', 'message2']);
    expect(() => responder.split()).toThrow(code('invalid_state'));
    initiator.readMessage2(responder.writeMessage2(new Uint8Array(0)));
    expect([initiator.step, responder.step]).toEqual(['split', 'split']);
    initiator.split();
    expect(initiator.step).toBe('done');
    // A second Split() would hand out the same keys with n = 0 again: nonce reuse.
    expect(() => initiator.split()).toThrow(code('invalid_state'));
  });

  it('refuses out-of-role and out-of-order steps', () => {
    const { initiator, responder } = classicPair();
    expect(() => responder.writeMessage1(new Uint8Array(0))).toThrow(code('invalid_state'));
    expect(() => initiator.readMessage1(new Uint8Array(100))).toThrow(code('invalid_state'));
    expect(() => initiator.writeMessage2(new Uint8Array(0))).toThrow(code('invalid_state'));
    expect(() => responder.writeMessage2(new Uint8Array(0))).toThrow(code('invalid_state'));
  });

  it('enters a terminal failed state after a bad message', () => {
    const { initiator, responder } = classicPair();
    const message1 = initiator.writeMessage1(new Uint8Array(0));
    expect(() => responder.readMessage1(message1.subarray(0, 40))).toThrow(code('invalid_message'));
    expect(responder.step).toBe('failed');
    expect(() => responder.readMessage1(message1)).toThrow(code('invalid_state'));
  });

  it('rejects handshake messages over 65 535 bytes on read and write', () => {
    const { initiator, responder } = classicPair();
    expect(() => responder.readMessage1(new Uint8Array(65_536))).toThrow(code('invalid_message'));
    expect(() => initiator.writeMessage1(new Uint8Array(65_535))).toThrow(code('payload_too_large'));
  });

  it('a hybrid initiator needs the responder KEM key', () => {
    expect(
      () =>
        new HybridIKHandshake({
          provider,
          kem,
          cipher: 'AESGCM',
          protocolName: PROTOCOL_NAME_HYBRID_AESGCM,
          role: 'initiator',
          prologue,
          s: provider.generateKeyPair(),
          sKem: kem.generateKeyPair(),
          rs: provider.generateKeyPair().publicKey,
        }),
    ).toThrow(code('invalid_state'));
  });
});
