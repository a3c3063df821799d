import { describe, expect, it } from 'vitest';
import { createNodeProvider, probePrivateKeyImport } from './node.js';
import { createPortableProvider } from './portable.js';

const major = Number(process.versions.node.split('.')[0]);

describe('node provider X25519 key import', () => {
  it("picks Node 24's raw-private format, and the placeholder JWK before it", () => {
    // Node 24 validates a JWK's `x` against `d`, so the placeholder trick of Node 20 and 22 must not be chosen.
    expect(probePrivateKeyImport()).toBe(major >= 24 ? 'raw-private' : 'jwk');
  });

  it('derives the same public keys and shared secrets as the portable provider', () => {
    const node = createNodeProvider();
    const portable = createPortableProvider();
    for (let i = 0; i < 20; i++) {
      const a = node.generateKeyPair();
      const b = portable.generateKeyPair();
      expect(portable.publicKeyFromSecret(a.secretKey)).toEqual(a.publicKey);
      expect(node.publicKeyFromSecret(b.secretKey)).toEqual(b.publicKey);
      expect(node.dh(a.secretKey, b.publicKey)).toEqual(portable.dh(b.secretKey, a.publicKey));
    }
  });
});
