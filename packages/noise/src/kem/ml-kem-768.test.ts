import { describe, expect, it } from 'vitest';
import { createMlKem768, defaultMlKemBackend, mlKem768PublicKeyOf } from './ml-kem-768.js';

describe('ML-KEM-768 backends', () => {
  it('uses the native PQClean backend by default on this machine', () => {
    // CI installs `pqclean` (allowed native build); without it the default silently becomes noble.
    expect(defaultMlKemBackend()).toBe('native');
  });

  it('native and noble interoperate in both directions', () => {
    const native = createMlKem768({ backend: 'native' });
    const noble = createMlKem768({ backend: 'noble' });
    for (const [a, b] of [
      [native, noble],
      [noble, native],
    ] as const) {
      const keys = a.generateKeyPair();
      expect(keys.publicKey).toHaveLength(1184);
      expect(keys.secretKey).toHaveLength(2400);
      expect(mlKem768PublicKeyOf(keys.secretKey)).toEqual(keys.publicKey);
      const { ciphertext, sharedSecret } = b.encapsulate(keys.publicKey);
      expect(ciphertext).toHaveLength(1088);
      expect(a.decapsulate(ciphertext, keys.secretKey)).toEqual(sharedSecret);
    }
  });

  it('rejects a tampered ciphertext implicitly (a different secret) on both backends', () => {
    for (const backend of ['native', 'noble'] as const) {
      const kem = createMlKem768({ backend });
      const keys = kem.generateKeyPair();
      const { ciphertext, sharedSecret } = kem.encapsulate(keys.publicKey);
      const tampered = Uint8Array.from(ciphertext);
      tampered[0]! ^= 1;
      expect(kem.decapsulate(tampered, keys.secretKey)).not.toEqual(sharedSecret);
    }
  });

  it('checks lengths before calling either backend', () => {
    for (const backend of ['native', 'noble'] as const) {
      const kem = createMlKem768({ backend });
      expect(() => kem.encapsulate(new Uint8Array(10))).toThrow(RangeError);
      expect(() => kem.decapsulate(new Uint8Array(1088), new Uint8Array(5))).toThrow(RangeError);
    }
  });

  it('takes injected randomness only on noble, which is then deterministic', () => {
    const seeded = () => {
      let counter = 0;
      return (length: number) => Uint8Array.from({ length }, () => counter++ & 0xff);
    };
    expect(() => createMlKem768({ backend: 'native', randomBytes: seeded() })).toThrow(/injected randomness/);
    const a = createMlKem768({ randomBytes: seeded() }).generateKeyPair();
    const b = createMlKem768({ randomBytes: seeded() }).generateKeyPair();
    expect(a.publicKey).toEqual(b.publicKey);
  });
});
