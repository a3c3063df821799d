import { inspect } from 'node:util';
import { describe, expect, it } from 'vitest';
import { PROVIDERS, runHybrid, seededRandom, toHex } from './__tests__/helpers.js';
import { HybridIKHandshake } from './handshake-state.js';
import { generateIdentity } from './identity.js';
import { createMlKem768 } from './kem/ml-kem-768.js';
import { buildRelayPrologue } from './prologue.js';
import { createInitiator, createResponder, HYBRID_MESSAGE2_LENGTH } from './session.js';
import { SUITE_HYBRID_AESGCM, SUITE_HYBRID_CHACHAPOLY, type Suite, suiteInfo } from './suite.js';

const provider = PROVIDERS.node!(seededRandom('session-provider'));
const kem = createMlKem768({ randomBytes: seededRandom('session-kem') });
const harness = generateIdentity({ provider, kem });
const executor = generateIdentity({ provider, kem });
const stranger = generateIdentity({ provider, kem });
const prologue = buildRelayPrologue({ environmentId: 'env-1', registrationId: 'registration-1', streamId: 'stream-1' });
const authorization = new TextEncoder().encode('harness-key-authorization-token');
const code = (code: string) => expect.objectContaining({ name: 'NoiseError', code });
const bytes = (text: string) => new TextEncoder().encode(text);
const text = (data: Uint8Array) => new TextDecoder().decode(data);

function pair(suite: Suite, payload = authorization) {
  return runHybrid({
    suite,
    initiatorProvider: provider,
    responderProvider: provider,
    initiatorKem: kem,
    responderKem: kem,
    initiatorKeys: harness,
    responderKeys: executor,
    prologue,
    payload,
  });
}

function initiatorFor(overrides: Partial<Parameters<typeof createInitiator>[0]> = {}) {
  return createInitiator({
    provider,
    kem,
    staticKeys: harness,
    remoteStatic: executor.publicKey,
    prologue,
    payload: authorization,
    ...overrides,
  });
}

function responderFor(overrides: Partial<Parameters<typeof createResponder>[0]> = {}) {
  return createResponder({ provider, kem, staticKeys: executor, prologue, ...overrides });
}

function flip(message: Uint8Array, index: number): Uint8Array {
  const copy = Uint8Array.from(message);
  copy[index]! ^= 0x01;
  return copy;
}

describe.each([SUITE_HYBRID_AESGCM, SUITE_HYBRID_CHACHAPOLY] as Suite[])('hybrid IK %s', (suite) => {
  it('authenticates both endpoints and carries the authorization (hybrid_ik_roundtrip)', () => {
    const run = pair(suite);
    expect(run.message1.length).toBe(3568 + authorization.length);
    expect(run.message2.length).toBe(3424);
    expect(text(run.pending.payload)).toBe(text(authorization));
    expect(run.pending.remoteStatic.suite).toBe(suite);
    expect(toHex(run.pending.remoteStatic.x25519)).toBe(toHex(harness.x25519.publicKey));
    expect(toHex(run.pending.remoteStatic.mlkem768)).toBe(toHex(harness.mlkem768.publicKey));
    expect(toHex(run.initiatorTransport.handshakeHash)).toBe(toHex(run.responderTransport.handshakeHash));
    // Harness sends with k1, executor with k2.
    const [iSend, iRecv] = run.initiatorTransport.keysForTesting();
    const [rSend, rRecv] = run.responderTransport.keysForTesting();
    expect(toHex(iSend)).toBe(toHex(rRecv));
    expect(toHex(iRecv)).toBe(toHex(rSend));
    expect(toHex(iSend)).not.toBe(toHex(iRecv));

    const request = run.initiatorTransport.encrypt(bytes('{"method":"initialize"}'));
    expect(request.length).toBe(23 + 16);
    expect(text(run.responderTransport.decrypt(request))).toBe('{"method":"initialize"}');
    const response = run.responderTransport.encrypt(bytes('{"id":1}'));
    expect(text(run.initiatorTransport.decrypt(response))).toBe('{"id":1}');
    expect(run.initiatorTransport.sendNonce).toBe(1n);
    expect(run.initiatorTransport.recvNonce).toBe(1n);
    expect(run.responderTransport.sendNonce).toBe(1n);
  });

  it('never lets the plaintext authorization or JSON appear on the wire', () => {
    const run = pair(suite);
    expect(Buffer.from(run.message1).includes(Buffer.from(authorization))).toBe(false);
    const record = run.initiatorTransport.encrypt(bytes('process/start'));
    expect(Buffer.from(record).includes(Buffer.from('process/start'))).toBe(false);
  });

  it('accepts an empty and a 4096-byte payload; rejects 4097 and 65 535 bytes before sending', () => {
    expect(pair(suite, new Uint8Array(0)).message1.length).toBe(3568);
    expect(pair(suite, new Uint8Array(4096).fill(97)).pending.payload.length).toBe(4096);
    for (const size of [4097, 65_535]) {
      expect(() =>
        initiatorFor({ suite, remoteStatic: { ...executor.publicKey, suite }, payload: new Uint8Array(size) }),
      ).toThrow(code('payload_too_large'));
    }
  });

  it('responder rejects the wrong pinned X25519 half (wrong_dh)', () => {
    const initiator = initiatorFor({
      suite,
      remoteStatic: { suite, x25519: stranger.x25519.publicKey, mlkem768: executor.mlkem768.publicKey },
    });
    expect(() => responderFor({ suite }).readMessage1(initiator.message1)).toThrow(code('handshake_failed'));
  });

  it('responder rejects the wrong pinned ML-KEM half (wrong_kem)', () => {
    const initiator = initiatorFor({
      suite,
      remoteStatic: { suite, x25519: executor.x25519.publicKey, mlkem768: stranger.mlkem768.publicKey },
    });
    expect(() => responderFor({ suite }).readMessage1(initiator.message1)).toThrow(code('handshake_failed'));
  });

  it('a different executor (another static key) cannot read message 1', () => {
    const initiator = initiatorFor({ suite, remoteStatic: { ...executor.publicKey, suite } });
    expect(() => responderFor({ suite, staticKeys: stranger }).readMessage1(initiator.message1)).toThrow(
      code('handshake_failed'),
    );
  });

  it('responder rejects a mismatched prologue (different stream id)', () => {
    const initiator = initiatorFor({ suite, remoteStatic: { ...executor.publicKey, suite } });
    const otherStream = buildRelayPrologue({
      environmentId: 'env-1',
      registrationId: 'registration-1',
      streamId: 'stream-2',
    });
    expect(() => responderFor({ suite, prologue: otherStream }).readMessage1(initiator.message1)).toThrow(
      code('handshake_failed'),
    );
  });

  it('responder and initiator must agree on the suite', () => {
    const other = suite === SUITE_HYBRID_AESGCM ? SUITE_HYBRID_CHACHAPOLY : SUITE_HYBRID_AESGCM;
    const initiator = initiatorFor({ suite, remoteStatic: { ...executor.publicKey, suite } });
    expect(() => responderFor({ suite: other }).readMessage1(initiator.message1)).toThrow(code('handshake_failed'));
  });

  it.each([
    ['skem ciphertext', 0],
    ['ephemeral X25519 key', 1088],
    ['ephemeral ML-KEM key', 1088 + 32 + 100],
    ['encrypted static X25519 key', 1088 + 32 + 1184 + 5],
    ['encrypted static ML-KEM key', 1088 + 32 + 1184 + 48 + 600],
    ['encrypted payload', 3568 + 3],
    ['payload tag (last byte)', -1],
  ])('responder rejects message 1 tampered in the %s', (_, offset) => {
    const initiator = initiatorFor({ suite, remoteStatic: { ...executor.publicKey, suite } });
    const index = offset < 0 ? initiator.message1.length + offset : offset;
    expect(() => responderFor({ suite }).readMessage1(flip(initiator.message1, index))).toThrow(
      code('handshake_failed'),
    );
  });

  it.each([
    ['ekem ciphertext', 0],
    ['encrypted skem ciphertext', 1088 + 10],
    ['ephemeral X25519 key', 1088 + 1104],
    ['ephemeral ML-KEM key', 1088 + 1104 + 32 + 7],
    ['empty-payload tag', 3423],
  ])('initiator rejects message 2 tampered in the %s', (_, index) => {
    const initiator = initiatorFor({ suite, remoteStatic: { ...executor.publicKey, suite } });
    const { message2 } = responderFor({ suite }).readMessage1(initiator.message1).writeMessage2();
    expect(() => initiator.readMessage2(flip(message2, index))).toThrow(code('handshake_failed'));
  });

  it('initiator rejects truncated, extended and payload-carrying message 2, and stays failed', () => {
    const start = () => {
      const initiator = initiatorFor({ suite, remoteStatic: { ...executor.publicKey, suite } });
      const responder = new HybridIKHandshake({
        provider,
        kem,
        cipher: suiteInfo(suite).cipher,
        protocolName: suiteInfo(suite).protocolName,
        role: 'responder',
        prologue,
        s: executor.x25519,
        sKem: executor.mlkem768,
      });
      responder.readMessage1(initiator.message1);
      return { initiator, responder };
    };
    const truncated = start();
    const message2 = truncated.responder.writeMessage2(new Uint8Array(0));
    expect(() => truncated.initiator.readMessage2(message2.subarray(0, HYBRID_MESSAGE2_LENGTH - 1))).toThrow(
      code('invalid_message'),
    );
    // A failed handshake is over: even the genuine message 2 is refused afterwards.
    expect(() => truncated.initiator.readMessage2(message2)).toThrow(code('invalid_state'));

    const extended = start();
    const withByte = Uint8Array.from([...extended.responder.writeMessage2(new Uint8Array(0)), 0]);
    expect(() => extended.initiator.readMessage2(withByte)).toThrow(code('handshake_failed'));

    // A correctly encrypted but non-empty payload (Codex's executor never sends one) is refused too.
    const carrying = start();
    const withPayload = carrying.responder.writeMessage2(bytes('surprise'));
    expect(withPayload.length).toBe(HYBRID_MESSAGE2_LENGTH + 8);
    expect(() => carrying.initiator.readMessage2(withPayload)).toThrow(/unexpected payload/);
  });

  it('responder rejects short and over-long message 1 before any crypto', () => {
    const initiator = initiatorFor({ suite, remoteStatic: { ...executor.publicKey, suite } });
    expect(() => responderFor({ suite }).readMessage1(initiator.message1.subarray(0, 3567))).toThrow(
      code('invalid_message'),
    );
    expect(() => responderFor({ suite }).readMessage1(new Uint8Array(3568 + 4097))).toThrow(code('payload_too_large'));
    expect(() => responderFor({ suite }).readMessage1(new Uint8Array(70_000))).toThrow(code('payload_too_large'));
  });

  it('each step runs once: a replayed message 1 or 2 is refused by the same state', () => {
    const initiator = initiatorFor({ suite, remoteStatic: { ...executor.publicKey, suite } });
    const responder = responderFor({ suite });
    const pending = responder.readMessage1(initiator.message1);
    expect(() => responder.readMessage1(initiator.message1)).toThrow(code('invalid_state'));
    const { message2 } = pending.writeMessage2();
    expect(() => pending.writeMessage2()).toThrow(code('invalid_state'));
    initiator.readMessage2(message2);
    expect(() => initiator.readMessage2(message2)).toThrow(code('invalid_state'));
  });

  it('a replayed message 1 gives the attacker no usable session (fresh responder, different keys)', () => {
    const run = pair(suite);
    const replayed = responderFor({ suite }).readMessage1(run.message1).writeMessage2();
    // The new responder ephemeral differs, so the genuine initiator transport cannot talk to it.
    const record = replayed.transport.encrypt(bytes('hello'));
    expect(() => run.initiatorTransport.decrypt(record)).toThrow(code('decrypt_failed'));
  });

  describe('transport', () => {
    it('rejects tampered, truncated, replayed, duplicated and reordered records', () => {
      const run = pair(suite);
      const records = ['a', 'b', 'c'].map((m) => run.initiatorTransport.encrypt(bytes(m)));
      expect(() => run.responderTransport.decrypt(flip(records[0]!, 0))).toThrow(code('decrypt_failed'));
      expect(() => run.responderTransport.decrypt(records[0]!.subarray(0, 10))).toThrow(code('decrypt_failed'));
      // Reordered: record 1 arrives while nonce 0 is expected.
      expect(() => run.responderTransport.decrypt(records[1]!)).toThrow(code('decrypt_failed'));
      expect(text(run.responderTransport.decrypt(records[0]!))).toBe('a');
      // Replayed / duplicated.
      expect(() => run.responderTransport.decrypt(records[0]!)).toThrow(code('decrypt_failed'));
      expect(text(run.responderTransport.decrypt(records[1]!))).toBe('b');
      expect(() => run.responderTransport.decrypt(records[1]!)).toThrow(code('decrypt_failed'));
      expect(text(run.responderTransport.decrypt(records[2]!))).toBe('c');
      expect(run.responderTransport.recvNonce).toBe(3n);
    });

    it('encryptInto seals the joined parts into the given buffer: same bytes and nonce as encrypt', () => {
      const run = pair(suite);
      const parts = [bytes('len:'), bytes('{"jsonrpc":"2.0"}'), new Uint8Array(0), new Uint8Array(40_000).fill(7)];
      const joined = Uint8Array.from(Buffer.concat(parts));
      const [sendKey] = run.initiatorTransport.keysForTesting();
      const cipher = suiteInfo(suite).cipher;
      const out = new Uint8Array(joined.length + 16);
      run.initiatorTransport.encryptInto(parts, out);
      // Nonce 0 is twelve zero bytes in both nonce layouts.
      expect(toHex(out)).toBe(toHex(provider.encrypt(cipher, sendKey, new Uint8Array(12), new Uint8Array(0), joined)));
      expect(run.initiatorTransport.sendNonce).toBe(1n);
      expect(toHex(run.responderTransport.decrypt(out))).toBe(toHex(joined));
      expect(toHex(run.responderTransport.decrypt(run.initiatorTransport.encrypt(joined)))).toBe(toHex(joined));
      expect(() => run.initiatorTransport.encryptInto(parts, new Uint8Array(joined.length))).toThrow(RangeError);
      expect(() => run.initiatorTransport.encryptInto([new Uint8Array(65_520)], new Uint8Array(65_536))).toThrow(
        code('payload_too_large'),
      );
      expect(run.initiatorTransport.sendNonce).toBe(2n);
    });

    it('decryptInto opens into the given buffer (in place too); a failure leaves the nonce where it was', () => {
      const run = pair(suite);
      const records = ['first', 'second'].map((m) => run.initiatorTransport.encrypt(bytes(m)));
      expect(() => run.responderTransport.decryptInto(flip(records[0]!, 2), new Uint8Array(5))).toThrow(
        code('decrypt_failed'),
      );
      expect(() => run.responderTransport.decryptInto(records[0]!, new Uint8Array(6))).toThrow(RangeError);
      expect(run.responderTransport.recvNonce).toBe(0n);
      const out = new Uint8Array(5);
      expect(run.responderTransport.decryptInto(records[0]!, out)).toBe(out);
      expect(text(out)).toBe('first');
      const inPlace = Uint8Array.from(records[1]!);
      expect(text(run.responderTransport.decryptInto(inPlace, inPlace.subarray(0, 6)))).toBe('second');
      expect(run.responderTransport.recvNonce).toBe(2n);
    });

    it('a record reflected back to its sender does not decrypt (directions use different keys)', () => {
      const run = pair(suite);
      const record = run.initiatorTransport.encrypt(bytes('x'));
      expect(() => run.initiatorTransport.decrypt(record)).toThrow(code('decrypt_failed'));
    });

    it('caps records at the Noise message limit', () => {
      const run = pair(suite);
      const max = run.initiatorTransport.encrypt(new Uint8Array(65_519));
      expect(max.length).toBe(65_535);
      expect(run.responderTransport.decrypt(max).length).toBe(65_519);
      expect(() => run.initiatorTransport.encrypt(new Uint8Array(65_520))).toThrow(code('payload_too_large'));
      expect(() => run.responderTransport.decrypt(new Uint8Array(65_536))).toThrow(code('invalid_message'));
    });
  });
});

describe('suite selection', () => {
  it('rejects an unknown suite (public_key_validation_rejects_unknown_suite)', () => {
    expect(() => initiatorFor({ remoteStatic: { ...executor.publicKey, suite: 'Noise_XX' as Suite } })).toThrow(
      code('bad_suite'),
    );
    expect(() => responderFor({ suite: 'nope' as Suite })).toThrow(code('bad_suite'));
  });

  it('refuses a suite that differs from the pinned key suite', () => {
    expect(() => initiatorFor({ suite: SUITE_HYBRID_CHACHAPOLY })).toThrow(code('bad_suite'));
  });

  it('defaults to the Codex AES-GCM suite on both sides', () => {
    const initiator = createInitiator({ staticKeys: harness, remoteStatic: executor.publicKey, prologue });
    const pending = createResponder({ staticKeys: executor, prologue }).readMessage1(initiator.message1);
    expect(pending.remoteStatic.suite).toBe(SUITE_HYBRID_AESGCM);
    const { message2 } = pending.writeMessage2();
    expect(initiator.readMessage2(message2).sendNonce).toBe(0n);
  });

  it('refuses a pinned key with a wrong-sized half on the initiator side', () => {
    expect(() =>
      initiatorFor({ remoteStatic: { ...executor.publicKey, mlkem768: executor.mlkem768.publicKey.subarray(1) } }),
    ).toThrow(code('invalid_public_key'));
    expect(() => initiatorFor({ remoteStatic: { ...executor.publicKey, x25519: new Uint8Array(33) } })).toThrow(
      code('invalid_public_key'),
    );
  });
});

describe('redaction', () => {
  it('keeps keys out of util.inspect and JSON', () => {
    const run = pair(SUITE_HYBRID_AESGCM);
    const [k1, k2] = run.initiatorTransport.keysForTesting();
    const secrets = [toHex(k1), toHex(k2), toHex(harness.x25519.secretKey)];
    const b64 = [
      Buffer.from(k1).toString('base64'),
      Buffer.from(harness.x25519.secretKey).toString('base64'),
      Buffer.from(harness.mlkem768.secretKey).toString('base64').slice(0, 40),
    ];
    const outputs = [
      inspect(run.initiatorTransport, { depth: 10, showHidden: true }),
      JSON.stringify(run.initiatorTransport),
      inspect(harness, { depth: 10 }),
      JSON.stringify(harness),
      JSON.stringify({ nested: { harness } }),
    ];
    for (const output of outputs) {
      expect(output).toContain('redacted');
      for (const secret of [...secrets, ...b64]) expect(output).not.toContain(secret);
      expect(output).not.toMatch(/\b(?:\d{1,3}, ){31}\d{1,3}\b/); // no raw 32-byte array dumps
    }
  });
});
