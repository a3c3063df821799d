import { hkdfSync } from 'node:crypto';
import { describe, expect, it, vi } from 'vitest';
import { hex, PROVIDERS, seededRandom, toHex } from './__tests__/helpers.js';
import { createNodeProvider } from './crypto/node.js';
import { type CipherName, hkdf, oneShotAead } from './crypto.js';
import { createMlKem768 } from './kem/ml-kem-768.js';

const node = PROVIDERS.node!();
const portable = PROVIDERS.portable!();

describe('crypto providers agree byte for byte', () => {
  const random = seededRandom('crypto-cross-check');

  it('X25519 matches RFC 7748 §6.1 on both providers', () => {
    const alice = hex('77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a');
    const bobPublic = hex('de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f');
    for (const provider of [node, portable]) {
      expect(toHex(provider.publicKeyFromSecret(alice))).toBe(
        '8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a',
      );
      expect(toHex(provider.dh(alice, bobPublic))).toBe(
        '4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742',
      );
    }
  });

  it('rejects an all-zero X25519 result (low-order point) on both providers', () => {
    const lowOrder = new Uint8Array(32);
    for (const provider of [node, portable]) {
      expect(() => provider.dh(random(32), lowOrder)).toThrow();
    }
  });

  it('X25519 keys and shared secrets agree', () => {
    for (let i = 0; i < 8; i++) {
      const a = random(32);
      const b = random(32);
      const bPublic = node.publicKeyFromSecret(b);
      expect(toHex(portable.publicKeyFromSecret(b))).toBe(toHex(bPublic));
      expect(toHex(portable.dh(a, bPublic))).toBe(toHex(node.dh(a, bPublic)));
    }
  });

  it("node's OS-random key pairs (generated natively, imported by JWK) are consistent with the portable provider", () => {
    for (let i = 0; i < 8; i++) {
      const a = node.generateKeyPair();
      const b = node.generateKeyPair();
      expect(toHex(portable.publicKeyFromSecret(a.secretKey))).toBe(toHex(a.publicKey));
      expect(toHex(node.publicKeyFromSecret(a.secretKey))).toBe(toHex(a.publicKey));
      // Fresh copies of the arrays bypass the KeyObject cache: same results.
      expect(toHex(node.dh(Uint8Array.from(a.secretKey), Uint8Array.from(b.publicKey)))).toBe(
        toHex(portable.dh(a.secretKey, b.publicKey)),
      );
      expect(toHex(node.dh(a.secretKey, b.publicKey))).toBe(toHex(node.dh(b.secretKey, a.publicKey)));
    }
  });

  it.each(['AESGCM', 'ChaChaPoly'] as CipherName[])('%s seals identically and opens the other provider', (cipher) => {
    for (const length of [0, 1, 15, 16, 17, 1000, 65_519]) {
      const key = random(32);
      const nonce = random(12);
      const ad = random(length % 40);
      const plaintext = random(length);
      const sealed = node.encrypt(cipher, key, nonce, ad, plaintext);
      expect(sealed.length).toBe(length + 16);
      expect(toHex(portable.encrypt(cipher, key, nonce, ad, plaintext))).toBe(toHex(sealed));
      expect(toHex(portable.decrypt(cipher, key, nonce, ad, sealed))).toBe(toHex(plaintext));
      expect(toHex(node.decrypt(cipher, key, nonce, ad, sealed))).toBe(toHex(plaintext));
      const tampered = Uint8Array.from(sealed);
      tampered[tampered.length - 1]! ^= 0x80;
      expect(() => node.decrypt(cipher, key, nonce, ad, tampered)).toThrow();
      expect(() => portable.decrypt(cipher, key, nonce, ad, tampered)).toThrow();
    }
  });

  it('keyed AEADs (native in place, node:crypto KeyObject, the one-shot wrapper) seal and open exactly as encrypt/decrypt', () => {
    for (const cipher of ['AESGCM', 'ChaChaPoly'] as CipherName[]) {
      const key = random(32);
      const aeads = [
        createNodeProvider({ aead: 'native' }).keyedAead!(cipher, key),
        createNodeProvider({ aead: 'node' }).keyedAead!(cipher, key),
        oneShotAead(node, cipher, key),
        oneShotAead(portable, cipher, key),
      ];
      for (const length of [0, 1, 15, 16, 17, 4100, 61_440]) {
        const nonce = random(12);
        const ad = random(length % 3 === 0 ? 0 : 13);
        const plaintext = random(length);
        const sealed = node.encrypt(cipher, key, nonce, ad, plaintext);
        const cut = length >> 2;
        for (const aead of aeads) {
          const out = new Uint8Array(length + 16);
          aead.sealInto(nonce, ad, [plaintext.subarray(0, cut), plaintext.subarray(cut)], out);
          expect(toHex(out)).toBe(toHex(sealed));
          expect(toHex(aead.open(nonce, ad, sealed))).toBe(toHex(plaintext));
          const into = new Uint8Array(length);
          aead.openInto(nonce, ad, sealed, into);
          expect(toHex(into)).toBe(toHex(plaintext));
          const inPlace = Uint8Array.from(sealed);
          aead.openInto(nonce, ad, inPlace, inPlace.subarray(0, length));
          expect(toHex(inPlace.subarray(0, length))).toBe(toHex(plaintext));
          expect(() => aead.openInto(nonce, ad, sealed, new Uint8Array(length + 1))).toThrow(RangeError);
          expect(() => aead.sealInto(nonce, ad, [plaintext], new Uint8Array(length + 15))).toThrow(RangeError);
          const tampered = Uint8Array.from(sealed);
          tampered[0]! ^= 1;
          expect(() => aead.open(nonce, ad, tampered)).toThrow();
          expect(() => aead.openInto(nonce, ad, tampered, new Uint8Array(length))).toThrow();
          expect(() => aead.open(nonce, ad, sealed.subarray(0, 15))).toThrow();
        }
      }
    }
  });

  it('falls back to node:crypto for records when the native AEAD is off, and refuses to force it then', async () => {
    vi.resetModules();
    vi.stubEnv('TETHER_NATIVE_CRYPTO', 'off');
    try {
      const { createNodeProvider: fresh } = await import('./crypto/node.js');
      const key = random(32);
      const nonce = random(12);
      const plaintext = random(1000);
      const out = new Uint8Array(1016);
      fresh().keyedAead!('AESGCM', key).sealInto(nonce, new Uint8Array(0), [plaintext], out);
      expect(toHex(out)).toBe(toHex(node.encrypt('AESGCM', key, nonce, new Uint8Array(0), plaintext)));
      expect(() => fresh({ aead: 'native' }).keyedAead!('AESGCM', key)).toThrow(
        'the native AEAD is not available: TETHER_NATIVE_CRYPTO=off',
      );
    } finally {
      vi.unstubAllEnvs();
    }
  });

  it('rejects ciphertexts shorter than the tag', () => {
    for (const provider of [node, portable]) {
      expect(() => provider.decrypt('AESGCM', random(32), random(12), new Uint8Array(0), random(15))).toThrow();
      expect(() => provider.decrypt('ChaChaPoly', random(32), random(12), new Uint8Array(0), random(15))).toThrow();
    }
  });

  it('SHA-256 and HMAC-SHA256 agree and match known answers', () => {
    const abc = new TextEncoder().encode('abc');
    for (const provider of [node, portable]) {
      expect(toHex(provider.hash([abc]))).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
      expect(toHex(provider.hash([abc.subarray(0, 1), abc.subarray(1)]))).toBe(
        'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad',
      );
      // RFC 4231 test case 2.
      expect(
        toHex(
          provider.hmac(new TextEncoder().encode('Jefe'), [new TextEncoder().encode('what do ya want for nothing?')]),
        ),
      ).toBe('5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843');
    }
  });

  it('Noise HKDF equals RFC 5869 HKDF with salt = ck and empty info', () => {
    const ck = random(32);
    const ikm = random(32);
    const reference = new Uint8Array(hkdfSync('sha256', ikm, ck, new Uint8Array(0), 96));
    for (const provider of [node, portable]) {
      const [o1, o2, o3] = hkdf(provider, ck, ikm, 3);
      expect(toHex(Uint8Array.from([...o1!, ...o2!, ...o3!]))).toBe(toHex(reference));
      expect(hkdf(provider, ck, ikm, 2).map(toHex)).toEqual([toHex(o1!), toHex(o2!)]);
    }
  });

  it('injected randomness makes key generation deterministic', () => {
    const a = PROVIDERS.node!(seededRandom('same')).generateKeyPair();
    const b = PROVIDERS.portable!(seededRandom('same')).generateKeyPair();
    expect(toHex(a.publicKey)).toBe(toHex(b.publicKey));
    expect(toHex(a.secretKey)).toBe(toHex(b.secretKey));
  });
});

describe('ML-KEM-768', () => {
  const kem = createMlKem768({ randomBytes: seededRandom('kem') });

  it('has the FIPS 203 sizes and round-trips', () => {
    const pair = kem.generateKeyPair();
    expect([pair.publicKey.length, pair.secretKey.length]).toEqual([1184, 2400]);
    const { ciphertext, sharedSecret } = kem.encapsulate(pair.publicKey);
    expect([ciphertext.length, sharedSecret.length]).toEqual([1088, 32]);
    expect(toHex(kem.decapsulate(ciphertext, pair.secretKey))).toBe(toHex(sharedSecret));
    // The secret key is reusable across decapsulations (a static key serves many handshakes).
    expect(toHex(kem.decapsulate(ciphertext, pair.secretKey))).toBe(toHex(sharedSecret));
  });

  it('implicitly rejects a wrong ciphertext (different secret, no throw) and refuses wrong lengths', () => {
    const pair = kem.generateKeyPair();
    const { ciphertext, sharedSecret } = kem.encapsulate(pair.publicKey);
    const tampered = Uint8Array.from(ciphertext);
    tampered[0]! ^= 1;
    expect(toHex(kem.decapsulate(tampered, pair.secretKey))).not.toBe(toHex(sharedSecret));
    expect(() => kem.decapsulate(ciphertext.subarray(1), pair.secretKey)).toThrow(RangeError);
    expect(() => kem.encapsulate(pair.publicKey.subarray(1))).toThrow(RangeError);
  });
});
