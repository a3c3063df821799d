import { describe, expect, it } from 'vitest';
import vectors from './__fixtures__/noise-ik-vectors.json' with { type: 'json' };
import { hex, keyPair, PROVIDER_NAMES, PROVIDERS, toHex, withFixedEphemerals } from './__tests__/helpers.js';
import type { CipherName } from './crypto.js';
import { ClassicIKHandshake } from './handshake-state.js';

// Published Cacophony vectors (source named in the fixture) check the spec core: CipherState,
// SymmetricState, the token methods and Split, independently of our hybrid pattern. The AESGCM entry
// pins the big-endian AES-GCM nonce layout; the ChaChaPoly one the little-endian layout.
const CASES: [string, CipherName][] = [
  ['Noise_IK_25519_ChaChaPoly_SHA256', 'ChaChaPoly'],
  ['Noise_IK_25519_AESGCM_SHA256', 'AESGCM'],
];

const cases = PROVIDER_NAMES.flatMap((name) => CASES.map(([protocol, cipher]) => ({ name, protocol, cipher })));

describe.each(cases)('$protocol published vector ($name provider)', ({ name, protocol, cipher }) => {
  const vector = vectors.vectors.find((v) => v.protocol_name === protocol)!;

  it('reproduces every handshake and transport ciphertext and the handshake hash', () => {
    const base = PROVIDERS[name]!();
    /** One side as the vector sets it up (`init_*` or `resp_*` fields), its ephemeral the vector's. */
    const side = (role: 'initiator' | 'responder', remoteStatic?: string) => {
      const of = role === 'initiator' ? 'init' : 'resp';
      return new ClassicIKHandshake({
        provider: withFixedEphemerals(base, [hex(vector[`${of}_ephemeral` as const])]),
        cipher,
        protocolName: protocol,
        role,
        prologue: hex(vector[`${of}_prologue` as const]),
        s: keyPair(base, vector[`${of}_static` as const]),
        rs: remoteStatic === undefined ? undefined : hex(remoteStatic),
      });
    };
    const initiator = side('initiator', vector.init_remote_static);
    const responder = side('responder');
    const [m1, m2, ...transportMessages] = vector.messages;

    const message1 = initiator.writeMessage1(hex(m1!.payload));
    expect(toHex(message1)).toBe(m1!.ciphertext);
    expect(toHex(responder.readMessage1(message1))).toBe(m1!.payload);
    expect(toHex(responder.remoteStaticKey()!)).toBe(toHex(keyPair(base, vector.init_static).publicKey));

    const message2 = responder.writeMessage2(hex(m2!.payload));
    expect(toHex(message2)).toBe(m2!.ciphertext);
    expect(toHex(initiator.readMessage2(message2))).toBe(m2!.payload);

    expect(toHex(initiator.getHandshakeHash())).toBe(vector.handshake_hash);
    expect(toHex(responder.getHandshakeHash())).toBe(vector.handshake_hash);

    const [iSend, iRecv] = initiator.split();
    const [r1, r2] = responder.split();
    transportMessages.forEach((message, index) => {
      // After IK's two messages the initiator writes first again: even indexes use k1, odd use k2.
      const [sender, receiver] = index % 2 === 0 ? [iSend, r1] : [r2, iRecv];
      const ciphertext = sender.encryptWithAd(new Uint8Array(0), hex(message.payload));
      expect(toHex(ciphertext)).toBe(message.ciphertext);
      expect(toHex(receiver.decryptWithAd(new Uint8Array(0), ciphertext))).toBe(message.payload);
    });
    expect(transportMessages).toHaveLength(4);
  });
});
