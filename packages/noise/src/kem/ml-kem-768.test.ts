import { describe, expect, it } from 'vitest';
import { createMlKem768, defaultMlKemBackend, mlKem768PublicKeyOf } from './ml-kem-768.js';

const major = Number(process.versions.node.split('.')[0]);
/** The backends this Node has: node:crypto's from Node 24, noble everywhere. */
const backends = major >= 24 ? (['node', 'noble'] as const) : (['noble'] as const);

describe('ML-KEM-768 backends', () => {
  it("uses node:crypto's ML-KEM by default where Node has it (24), else noble", () => {
    expect(defaultMlKemBackend()).toBe(major >= 24 ? 'node' : 'noble');
  });

  it('gives the node backend where Node has ML-KEM and refuses it, naming the version, where not', () => {
    if (major >= 24) expect(createMlKem768({ backend: 'node' }).name).toBe('MLKEM768');
    else expect(() => createMlKem768({ backend: 'node' })).toThrow(/no ML-KEM-768 in node:crypto/);
  });

  it('every pair of backends interoperates, with static and ephemeral keys, in both directions', () => {
    for (const a of backends.map((backend) => createMlKem768({ backend }))) {
      for (const b of backends.map((backend) => createMlKem768({ backend }))) {
        const keys = a.generateKeyPair();
        expect(keys.publicKey).toHaveLength(1184);
        expect(keys.secretKey).toHaveLength(2400);
        expect(mlKem768PublicKeyOf(keys.secretKey)).toEqual(keys.publicKey);
        const toStatic = b.encapsulate(keys.publicKey);
        expect(toStatic.ciphertext).toHaveLength(1088);
        expect(keys.decapsulate(toStatic.ciphertext)).toEqual(toStatic.sharedSecret);
        expect(a.decapsulate(toStatic.ciphertext, keys.secretKey)).toEqual(toStatic.sharedSecret);
        // The bytes alone (an identity file read back) decapsulate on every backend.
        expect(b.decapsulate(toStatic.ciphertext, Uint8Array.from(keys.secretKey))).toEqual(toStatic.sharedSecret);

        const ephemeral = a.generateEphemeral();
        expect(ephemeral.publicKey).toHaveLength(1184);
        const toEphemeral = b.encapsulate(ephemeral.publicKey);
        expect(ephemeral.decapsulate(toEphemeral.ciphertext)).toEqual(toEphemeral.sharedSecret);
      }
    }
  });

  it('rejects a tampered ciphertext implicitly (a different secret) on every backend', () => {
    for (const backend of backends) {
      const kem = createMlKem768({ backend });
      const keys = kem.generateKeyPair();
      const { ciphertext, sharedSecret } = kem.encapsulate(keys.publicKey);
      const tampered = Uint8Array.from(ciphertext);
      tampered[0]! ^= 1;
      expect(kem.decapsulate(tampered, keys.secretKey)).not.toEqual(sharedSecret);
      const ephemeral = kem.generateEphemeral();
      const sent = kem.encapsulate(ephemeral.publicKey);
      const bad = Uint8Array.from(sent.ciphertext);
      bad[5]! ^= 0x40;
      expect(ephemeral.decapsulate(bad)).not.toEqual(sent.sharedSecret);
    }
  });

  it('checks lengths before calling either backend', () => {
    for (const backend of backends) {
      const kem = createMlKem768({ backend });
      expect(() => kem.encapsulate(new Uint8Array(10))).toThrow(RangeError);
      expect(() => kem.decapsulate(new Uint8Array(1088), new Uint8Array(5))).toThrow(RangeError);
      expect(() => kem.generateEphemeral().decapsulate(new Uint8Array(7))).toThrow(RangeError);
    }
  });

  it('refuses a secret key whose embedded H(ek) does not match (FIPS 203 decapsulation key check)', () => {
    for (const backend of backends) {
      const kem = createMlKem768({ backend });
      const keys = kem.generateKeyPair();
      const { ciphertext } = kem.encapsulate(keys.publicKey);
      const broken = Uint8Array.from(keys.secretKey);
      broken[1152 + 3]! ^= 1; // a byte of the embedded encapsulation key
      expect(() => kem.decapsulate(ciphertext, broken)).toThrow();
    }
  });

  it('takes injected randomness only on noble, which is then deterministic', () => {
    const seeded = () => {
      let counter = 0;
      return (length: number) => Uint8Array.from({ length }, () => counter++ & 0xff);
    };
    expect(() => createMlKem768({ backend: 'node', randomBytes: seeded() })).toThrow();
    const a = createMlKem768({ randomBytes: seeded() }).generateKeyPair();
    const b = createMlKem768({ randomBytes: seeded() }).generateKeyPair();
    expect(a.publicKey).toEqual(b.publicKey);
  });
});
