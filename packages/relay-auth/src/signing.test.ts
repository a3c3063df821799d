import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  grantIdentity,
  grantMessage,
  loadOrCreateSigningKey,
  NONCE_PATTERN,
  nonceForGrant,
  publicKeyFromPem,
  relayNodeOf,
  SIGNING_KEY_FILE,
  signingKeyFromPem,
  signRelayUrl,
  verifyRelayRequest,
  verifyRelayUrl,
} from './index.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function tempKey() {
  const dir = mkdtempSync(join(tmpdir(), 'relay-auth-'));
  dirs.push(dir);
  return loadOrCreateSigningKey(dir);
}

describe('relay signing key', () => {
  it('is generated once into the data dir with mode 0600 and reloaded after', () => {
    const dir = mkdtempSync(join(tmpdir(), 'relay-auth-'));
    dirs.push(dir);
    const data = join(dir, 'data');
    const first = loadOrCreateSigningKey(data);
    const path = join(data, SIGNING_KEY_FILE);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    const again = loadOrCreateSigningKey(data);
    expect(again.publicKey.export({ format: 'jwk' })).toEqual(first.publicKey.export({ format: 'jwk' }));
    expect(signingKeyFromPem(readFileSync(path, 'utf8')).privateKey.asymmetricKeyType).toBe('ed25519');
  });

  it('signs role, environment, registration, epoch and expiry', () => {
    const key = tempKey();
    const grant = { role: 'harness' as const, environmentId: 'e1', registrationId: 'r1', epoch: 7, expiresAt: 2_000 };
    const url = signRelayUrl('wss://relay.example/base/', grant, key);
    expect(
      url.startsWith(
        'wss://relay.example/base/ws/environment/e1?role=harness&registration=r1&epoch=7&expires=2000&sig=',
      ),
    ).toBe(true);
    expect(verifyRelayUrl(url, key.publicKey, 1_999)).toEqual(grant);
    expect(verifyRelayUrl(url, key.publicKey, 2_000)).toBeNull();
    expect(verifyRelayUrl(url.replace('registration=r1', 'registration=r2'), key.publicKey, 1)).toBeNull();
    expect(verifyRelayUrl(url.replace('expires=2000', 'expires=3000'), key.publicKey, 1)).toBeNull();
    expect(verifyRelayUrl(url.replace('epoch=7', 'epoch=8'), key.publicKey, 1)).toBeNull();
  });

  it('signs a harness grant’s nonce too, under its own domain tag; each nonce is fresh', () => {
    const key = tempKey();
    const nonce = nonceForGrant();
    expect(nonce).toMatch(NONCE_PATTERN);
    expect(nonceForGrant()).not.toBe(nonce);
    const grant = { role: 'harness' as const, environmentId: 'e1', registrationId: 'r1', epoch: 7, expiresAt: 2_000 };
    const url = signRelayUrl('wss://relay.example', { ...grant, nonce }, key);
    expect(url).toContain(`&expires=2000&nonce=${nonce}&sig=`);
    expect(verifyRelayUrl(url, key.publicKey, 1)).toEqual({ ...grant, nonce });
    // Another nonce, none, or the signature of the same grant without one: all refused.
    expect(verifyRelayUrl(url.replace(nonce, nonceForGrant()), key.publicKey, 1)).toBeNull();
    expect(verifyRelayUrl(url.replace(`&nonce=${nonce}`, ''), key.publicKey, 1)).toBeNull();
    const without = new URL(signRelayUrl('wss://relay.example', grant, key));
    const withOtherSig = new URL(url);
    withOtherSig.searchParams.set('sig', without.searchParams.get('sig') as string);
    expect(verifyRelayUrl(withOtherSig.toString(), key.publicKey, 1)).toBeNull();
    expect(grantMessage({ ...grant, nonce }).toString()).toBe(
      `tether-relay-url-v3\nharness\ne1\nr1\n7\n2000\n${nonce}`,
    );
    expect(grantMessage(grant).toString()).toBe('tether-relay-url-v2\nharness\ne1\nr1\n7\n2000');
    // Two bundles of one registration in the same second are two grants.
    expect(grantIdentity({ ...grant, nonce })).not.toBe(grantIdentity({ ...grant, nonce: nonceForGrant() }));
    expect(grantIdentity({ ...grant, nonce })).not.toBe(grantIdentity(grant));
  });

  it('refuses to sign a nonce that is not 16 bytes of base64url', () => {
    const key = tempKey();
    for (const nonce of ['', 'short', `${'A'.repeat(21)}=`, 'A'.repeat(23), `${'A'.repeat(21)}\n`]) {
      const grant = {
        role: 'harness' as const,
        environmentId: 'e1',
        registrationId: 'r1',
        epoch: 1,
        expiresAt: 9,
        nonce,
      };
      expect(() => signRelayUrl('ws://127.0.0.1:1', grant, key)).toThrow(RangeError);
    }
  });

  it('refuses to sign an epoch that is not a safe integer ≥ 0', () => {
    const key = tempKey();
    for (const epoch of [-1, 1.5, Number.NaN, 2 ** 53]) {
      const grant = { role: 'harness' as const, environmentId: 'e1', registrationId: 'r1', epoch, expiresAt: 2_000 };
      expect(() => signRelayUrl('ws://127.0.0.1:1', grant, key)).toThrow(RangeError);
    }
  });

  it('refuses non-Ed25519 PEMs', () => {
    const { privateKey, publicKey } = generateKeyPairSync('x25519');
    expect(() => signingKeyFromPem(privateKey.export({ type: 'pkcs8', format: 'pem' }) as string)).toThrow(/Ed25519/);
    expect(() => publicKeyFromPem(publicKey.export({ type: 'spki', format: 'pem' }) as string)).toThrow(/Ed25519/);
  });

  it('loads the verifying key from a public (SPKI) or a private (PKCS#8) PEM', () => {
    const key = tempKey();
    const spki = key.publicKey.export({ type: 'spki', format: 'pem' }) as string;
    const pkcs8 = key.privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
    const jwk = key.publicKey.export({ format: 'jwk' });
    expect(publicKeyFromPem(spki).export({ format: 'jwk' })).toEqual(jwk);
    expect(publicKeyFromPem(pkcs8).export({ format: 'jwk' })).toEqual(jwk);
  });
});

describe('verifyRelayRequest (what the relay checks at the upgrade)', () => {
  const key = tempKey();
  const other = generateKeyPairSync('ed25519');
  const grant = {
    role: 'environment' as const,
    environmentId: 'env_1',
    registrationId: 'reg-1',
    epoch: 3,
    expiresAt: 5_000,
  };
  const url = new URL(signRelayUrl('ws://127.0.0.1:1/prefix', grant, key));
  const path = `${url.pathname}${url.search}`;

  it('accepts the signed path and query and returns the grant', () => {
    expect(verifyRelayRequest(path, key.publicKey, 4_999)).toEqual({ ok: true, grant });
  });

  it.each([
    ['no signature', path.replace(/&sig=[^&]+/, ''), 401, 'missing_signature'],
    ['no expiry', path.replace(/&expires=\d+/, ''), 401, 'missing_signature'],
    ['no epoch', path.replace(/&epoch=\d+/, ''), 401, 'missing_signature'],
    ['a non-numeric epoch', path.replace('epoch=3', 'epoch=-3'), 401, 'missing_signature'],
    ['an older epoch', path.replace('epoch=3', 'epoch=2'), 401, 'bad_signature'],
    ['another path', path.replace('/ws/environment/env_1', '/ws/env_1'), 401, 'missing_signature'],
    ['a non-numeric expiry', path.replace('expires=5000', 'expires=5e3'), 401, 'missing_signature'],
    [
      'a control character in the registration',
      path.replace('registration=reg-1', 'registration=reg%0A1'),
      401,
      'missing_signature',
    ],
    ['the role changed to harness', path.replace('role=environment', 'role=harness'), 401, 'bad_signature'],
    ['another environment', path.replace('/env_1?', '/env_2?'), 401, 'bad_signature'],
    ['a truncated signature', path.slice(0, -4), 401, 'bad_signature'],
    ['an unknown role', path.replace('role=environment', 'role=admin'), 403, 'forbidden_role'],
  ])('refuses %s', (_what, candidate, status, reason) => {
    expect(verifyRelayRequest(candidate, key.publicKey, 1)).toEqual({ ok: false, status, reason });
  });

  it.each([
    ['an empty nonce', ''],
    ['a short nonce', 'abc'],
    ['a long nonce', 'A'.repeat(23)],
    ['a nonce with padding', `${'A'.repeat(21)}=`],
  ])('refuses a URL with %s (missing_signature), never reading it as no nonce', (_what, nonce) => {
    expect(verifyRelayRequest(`${path}&nonce=${encodeURIComponent(nonce)}`, key.publicKey, 1)).toEqual({
      ok: false,
      status: 401,
      reason: 'missing_signature',
    });
  });

  it('refuses a nonce added to a URL signed without one', () => {
    expect(verifyRelayRequest(`${path}&nonce=${nonceForGrant()}`, key.publicKey, 1)).toEqual({
      ok: false,
      status: 401,
      reason: 'bad_signature',
    });
  });

  it('refuses an expired grant and a signature by another key', () => {
    expect(verifyRelayRequest(path, key.publicKey, 5_000)).toEqual({ ok: false, status: 401, reason: 'expired' });
    expect(verifyRelayRequest(path, other.publicKey, 1)).toEqual({ ok: false, status: 401, reason: 'bad_signature' });
  });
});

describe('relayNodeOf', () => {
  it('gives a node base and every URL signed for it the same canonical form, without the query', () => {
    const key = signingKeyFromPem(
      generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }) as string,
    );
    const grant = { role: 'environment' as const, environmentId: 'dev-1', registrationId: 'r', epoch: 1, expiresAt: 9 };
    for (const base of ['ws://127.0.0.1:8081', 'ws://127.0.0.1:8081/', 'wss://relay.example:443/edge/']) {
      const signed = signRelayUrl(base, grant, key);
      expect(relayNodeOf(signed)).toBe(relayNodeOf(base));
      expect(relayNodeOf(signed)).not.toContain('sig');
    }
    expect(relayNodeOf('wss://relay.example:443/edge/')).toBe('wss://relay.example/edge');
    expect(relayNodeOf('ws://a:1')).not.toBe(relayNodeOf('ws://a:2'));
    expect(relayNodeOf('http://a:1')).toBeNull();
    expect(relayNodeOf('not a url')).toBeNull();
  });
});
