import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { pickRelayNode } from './routing.js';
import {
  loadOrCreateSigningKey,
  SIGNING_KEY_FILE,
  signingKeyFromPem,
  signRelayUrl,
  verifyRelayUrl,
} from './signing.js';
import { generateToken, hashToken, matchesEnvironmentGlob } from './tokens.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe('relay signing key', () => {
  it('is generated once into the data dir with mode 0600 and reloaded after', () => {
    const dir = mkdtempSync(join(tmpdir(), 'registry-key-'));
    dirs.push(dir);
    const data = join(dir, 'data');
    const first = loadOrCreateSigningKey(data);
    const path = join(data, SIGNING_KEY_FILE);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    const again = loadOrCreateSigningKey(data);
    expect(again.publicKey.export({ format: 'jwk' })).toEqual(first.publicKey.export({ format: 'jwk' }));
    expect(signingKeyFromPem(readFileSync(path, 'utf8')).privateKey.asymmetricKeyType).toBe('ed25519');
  });

  it('signs role, environment, registration and expiry', () => {
    const dir = mkdtempSync(join(tmpdir(), 'registry-key-'));
    dirs.push(dir);
    const key = loadOrCreateSigningKey(dir);
    const grant = { role: 'harness' as const, environmentId: 'e1', registrationId: 'r1', expiresAt: 2_000 };
    const url = signRelayUrl('wss://relay.example/base/', grant, key);
    expect(
      url.startsWith('wss://relay.example/base/ws/environment/e1?role=harness&registration=r1&expires=2000&sig='),
    ).toBe(true);
    expect(verifyRelayUrl(url, key.publicKey, 1_999)).toEqual(grant);
    expect(verifyRelayUrl(url, key.publicKey, 2_000)).toBeNull();
    expect(verifyRelayUrl(url.replace('registration=r1', 'registration=r2'), key.publicKey, 1)).toBeNull();
    expect(verifyRelayUrl(url.replace('expires=2000', 'expires=3000'), key.publicKey, 1)).toBeNull();
  });

  it('refuses non-Ed25519 PEMs', async () => {
    const { generateKeyPairSync } = await import('node:crypto');
    const { privateKey } = generateKeyPairSync('x25519');
    expect(() => signingKeyFromPem(privateKey.export({ type: 'pkcs8', format: 'pem' }) as string)).toThrow(/Ed25519/);
  });
});

describe('tokens and routing', () => {
  it('tokens are random and hashed with SHA-256', () => {
    const a = generateToken();
    expect(a).toMatch(/^treg_[A-Za-z0-9_-]{43}$/);
    expect(generateToken()).not.toBe(a);
    expect(hashToken('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
  });

  it.each([
    ['dev-*', 'dev-1', true],
    ['dev-*', 'dev-', true],
    ['dev-*', 'prod-1', false],
    ['*', 'anything', true],
    ['a?c', 'abc', true],
    ['a?c', 'ac', false],
    ['exact', 'exact', true],
    ['exact', 'exactly', false],
    ['a.c', 'abc', false],
  ])('glob %j vs %j → %s', (pattern, id, expected) => {
    expect(matchesEnvironmentGlob(pattern, id)).toBe(expected);
  });

  it('rendezvous hashing is stable and moves only the removed node’s environments', () => {
    const nodes = ['ws://a', 'ws://b', 'ws://c'];
    expect(pickRelayNode([], 'x')).toBeUndefined();
    const before = new Map(Array.from({ length: 300 }, (_, i) => [`e${i}`, pickRelayNode(nodes, `e${i}`)]));
    const counts = new Map<string, number>();
    for (const node of before.values()) counts.set(node as string, (counts.get(node as string) ?? 0) + 1);
    for (const node of nodes) expect(counts.get(node)).toBeGreaterThan(60);
    for (const [env, node] of before) {
      const after = pickRelayNode(['ws://a', 'ws://c'], env);
      if (node !== 'ws://b') expect(after).toBe(node);
    }
  });
});
