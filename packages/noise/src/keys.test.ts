import { describe, expect, it } from 'vitest';
import { PROVIDERS, seededRandom } from './__tests__/helpers.js';
import { decodeBase64Strict, encodeBase64 } from './base64.js';
import { generateIdentity } from './identity.js';
import { createMlKem768 } from './kem/ml-kem-768.js';
import { parsePublicKey, parsePublicKeyJson, publicKeyToJson, serializePublicKey } from './keys.js';
import { SUITE_HYBRID_AESGCM, SUITE_HYBRID_CHACHAPOLY } from './suite.js';

const identity = generateIdentity({
  provider: PROVIDERS.node!(seededRandom('keys-test')),
  kem: createMlKem768({ randomBytes: seededRandom('keys-test-kem') }),
});
const good = publicKeyToJson(identity.publicKey);
const code = (code: string) => expect.objectContaining({ name: 'NoiseError', code });

describe('NoiseChannelPublicKey JSON (rendezvous.md §2.3)', () => {
  it('serializes exactly suite, x25519_public_key, mlkem768_public_key with the Codex suite', () => {
    expect(Object.keys(good)).toEqual(['suite', 'x25519_public_key', 'mlkem768_public_key']);
    expect(good.suite).toBe('Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256');
    expect(good.x25519_public_key).toHaveLength(44);
    expect(good.mlkem768_public_key).toHaveLength(1580);
    expect(good.x25519_public_key).toBe(Buffer.from(identity.x25519.publicKey).toString('base64'));
    expect(good.mlkem768_public_key).toBe(Buffer.from(identity.mlkem768.publicKey).toString('base64'));
  });

  it('round-trips through text', () => {
    const parsed = parsePublicKeyJson(serializePublicKey(identity.publicKey));
    expect(parsed.suite).toBe(SUITE_HYBRID_AESGCM);
    expect(Buffer.from(parsed.x25519).equals(Buffer.from(identity.x25519.publicKey))).toBe(true);
    expect(Buffer.from(parsed.mlkem768).equals(Buffer.from(identity.mlkem768.publicKey))).toBe(true);
  });

  it('accepts the ChaChaPoly suite and rejects any other suite as bad_suite', () => {
    expect(parsePublicKey({ ...good, suite: SUITE_HYBRID_CHACHAPOLY }).suite).toBe(SUITE_HYBRID_CHACHAPOLY);
    for (const suite of [
      'Noise_hybridIK_25519+MLKEM768_AESGCM_SHA256', // the protocol name is not a suite tag
      'noise_hybrid_ik_v1',
      'Noise_IK_25519_ChaChaPoly_SHA256',
      '',
      42,
      null,
    ]) {
      expect(() => parsePublicKey({ ...good, suite })).toThrow(code('bad_suite'));
    }
  });

  it('rejects unknown and missing fields', () => {
    expect(() => parsePublicKey({ ...good, extra: 1 })).toThrow(code('invalid_public_key'));
    const { mlkem768_public_key: _, ...missing } = good;
    expect(() => parsePublicKey(missing)).toThrow(code('invalid_public_key'));
    expect(() => parsePublicKey([good])).toThrow(code('invalid_public_key'));
    expect(() => parsePublicKey(null)).toThrow(code('invalid_public_key'));
    expect(() => parsePublicKeyJson('{not json')).toThrow(code('invalid_public_key'));
  });

  it('rejects over-long key strings before decoding (4096 chars, valid base64)', () => {
    const long = 'A'.repeat(4096);
    expect(() => parsePublicKey({ ...good, x25519_public_key: long })).toThrow(/invalid x25519_public_key length/);
    expect(() => parsePublicKey({ ...good, mlkem768_public_key: long })).toThrow(/invalid mlkem768_public_key length/);
  });

  it('rejects wrong decoded lengths, unpadded, URL-safe, whitespace and non-canonical encodings', () => {
    const x = good.x25519_public_key;
    const variants = [
      Buffer.alloc(31).toString('base64'), // also 44 chars, but decodes to 31 bytes
      Buffer.alloc(33).toString('base64'), // also 44 chars (no padding), decodes to 33 bytes
      x.replace(/=$/, ''),
      `${x.slice(0, 43)}`,
      x.replace(/[+/]/g, '-').replace(/^./, '-'),
      ` ${x.slice(1)}`,
      `${x.slice(0, 42)}${'B'}=`, // 'B' leaves non-zero bits that padding drops
      42,
    ];
    for (const value of variants) {
      expect(() => parsePublicKey({ ...good, x25519_public_key: value })).toThrow(code('invalid_public_key'));
    }
    const m = good.mlkem768_public_key;
    expect(() => parsePublicKey({ ...good, mlkem768_public_key: `${m.slice(0, 1578)}B=` })).toThrow(
      code('invalid_public_key'),
    );
  });

  it('checks key lengths when serializing', () => {
    expect(() => publicKeyToJson({ ...identity.publicKey, x25519: new Uint8Array(31) })).toThrow(
      code('invalid_public_key'),
    );
    expect(() => publicKeyToJson({ ...identity.publicKey, mlkem768: new Uint8Array(1183) })).toThrow(
      code('invalid_public_key'),
    );
  });
});

describe('strict base64', () => {
  it('agrees with Buffer for canonical input and rejects everything else', () => {
    const random = seededRandom('base64');
    for (let length = 0; length < 40; length++) {
      const bytes = random(length);
      const text = encodeBase64(bytes);
      expect(text).toBe(Buffer.from(bytes).toString('base64'));
      expect(Buffer.from(decodeBase64Strict(text)!).equals(Buffer.from(bytes))).toBe(true);
    }
    expect(decodeBase64Strict('QQ==')).toEqual(Uint8Array.of(0x41));
    expect(decodeBase64Strict('QR==')).toBeNull();
    expect(decodeBase64Strict('QQ')).toBeNull();
    expect(decodeBase64Strict('QQ=')).toBeNull();
    expect(decodeBase64Strict('Q===')).toBeNull();
    expect(decodeBase64Strict('_-==')).toBeNull();
  });
});
