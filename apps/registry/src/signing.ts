import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject, sign, verify } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Ed25519 key pair the registry signs relay URLs with; relays verify with the public half alone. */
export interface SigningKey {
  privateKey: KeyObject;
  publicKey: KeyObject;
}

export type RelayRole = 'environment' | 'harness';

export interface RelayGrant {
  role: RelayRole;
  environmentId: string;
  registrationId: string;
  /** Epoch seconds. */
  expiresAt: number;
}

export const SIGNING_KEY_FILE = 'relay-signing-key.pem';
const DOMAIN = 'tether-relay-url-v1';

/** The exact bytes signed: a domain tag and the four grant fields, newline-separated (none may contain one). */
export function grantMessage(grant: RelayGrant): Buffer {
  return Buffer.from(
    [DOMAIN, grant.role, grant.environmentId, grant.registrationId, String(grant.expiresAt)].join('\n'),
  );
}

export function signingKeyFromPem(pem: string): SigningKey {
  const privateKey = createPrivateKey(pem);
  if (privateKey.asymmetricKeyType !== 'ed25519') throw new Error('relay signing key must be Ed25519');
  return { privateKey, publicKey: createPublicKey(privateKey) };
}

/** Loads `DIR/relay-signing-key.pem`, generating it (mode 0600, directory 0700) on first start. */
export function loadOrCreateSigningKey(dataDir: string): SigningKey {
  const path = join(dataDir, SIGNING_KEY_FILE);
  if (existsSync(path)) return signingKeyFromPem(readFileSync(path, 'utf8'));
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const { privateKey } = generateKeyPairSync('ed25519');
  writeFileSync(path, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600, flag: 'wx' });
  chmodSync(path, 0o600);
  return signingKeyFromPem(readFileSync(path, 'utf8'));
}

/** `BASE/ws/environment/ID?role=…&registration=…&expires=…&sig=…` (sig: base64url Ed25519 over grantMessage). */
export function signRelayUrl(base: string, grant: RelayGrant, key: SigningKey): string {
  const sig = sign(null, grantMessage(grant), key.privateKey).toString('base64url');
  const url = new URL(`${base.replace(/\/+$/, '')}/ws/environment/${grant.environmentId}`);
  url.searchParams.set('role', grant.role);
  url.searchParams.set('registration', grant.registrationId);
  url.searchParams.set('expires', String(grant.expiresAt));
  url.searchParams.set('sig', sig);
  return url.toString();
}

/** What a relay does: the grant a URL carries when its signature verifies and it is unexpired, else null. */
export function verifyRelayUrl(url: string, publicKey: KeyObject, nowSeconds: number): RelayGrant | null {
  const parsed = new URL(url);
  const match = /\/ws\/environment\/([A-Za-z0-9_-]{1,128})$/.exec(parsed.pathname);
  const role = parsed.searchParams.get('role');
  const registrationId = parsed.searchParams.get('registration');
  const expires = Number(parsed.searchParams.get('expires'));
  const sig = parsed.searchParams.get('sig');
  if (!match || (role !== 'environment' && role !== 'harness') || !registrationId || !sig) return null;
  if (!Number.isSafeInteger(expires) || expires <= nowSeconds) return null;
  const grant: RelayGrant = { role, environmentId: match[1] as string, registrationId, expiresAt: expires };
  return verify(null, grantMessage(grant), publicKey, Buffer.from(sig, 'base64url')) ? grant : null;
}
