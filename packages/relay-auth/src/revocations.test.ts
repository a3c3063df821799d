import { generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { revocationsMessage, signingKeyFromPem, signRevocations, verifyRevocations } from './index.js';

function freshKey() {
  const { privateKey } = generateKeyPairSync('ed25519');
  return signingKeyFromPem(privateKey.export({ type: 'pkcs8', format: 'pem' }).toString());
}

const body = JSON.stringify({
  revoked_registrations: [{ environment_id: 'env-1', registration_id: 'reg-1' }],
  issued_at: 1_800_000_000,
});

describe('revocation push signatures', () => {
  it('verifies a signature over the exact body bytes under the signing public key', () => {
    const key = freshKey();
    const signature = signRevocations(body, key);
    expect(signature).toMatch(/^[A-Za-z0-9_-]{86}$/);
    expect(verifyRevocations(body, signature, key.publicKey)).toBe(true);
  });

  it('signs the domain tag followed by the body', () => {
    expect(revocationsMessage('{}').toString('utf8')).toBe('tether-relay-revocations-v1\n{}');
  });

  it('refuses a changed body, even one that parses to the same JSON', () => {
    const key = freshKey();
    const signature = signRevocations(body, key);
    expect(verifyRevocations(body.replace('reg-1', 'reg-2'), signature, key.publicKey)).toBe(false);
    expect(verifyRevocations(`${body} `, signature, key.publicKey)).toBe(false);
  });

  it('refuses another key, a URL signature domain and malformed signatures', () => {
    const key = freshKey();
    const signature = signRevocations(body, key);
    expect(verifyRevocations(body, signature, freshKey().publicKey)).toBe(false);
    expect(verifyRevocations(body, '', key.publicKey)).toBe(false);
    expect(verifyRevocations(body, 'not base64url!', key.publicKey)).toBe(false);
    expect(verifyRevocations(body, signature.slice(0, 40), key.publicKey)).toBe(false);
    expect(verifyRevocations(body, `${signature}AA`, key.publicKey)).toBe(false);
  });
});
