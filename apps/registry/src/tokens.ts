import { createHash, randomBytes } from 'node:crypto';

/** A new random bearer token (32 bytes, base64url) with a recognisable prefix. Shown once, never stored. */
export function generateToken(prefix = 'treg'): string {
  return `${prefix}_${randomBytes(32).toString('base64url')}`;
}

/** SHA-256 hex: what the store keeps in place of API keys and harness authorizations. */
export function hashToken(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

/** Environment-id glob: `*` matches any run (possibly empty), `?` one character; everything else literally. */
export function matchesEnvironmentGlob(pattern: string, environmentId: string): boolean {
  const source = pattern
    .replace(/[.+^${}()|[\]\\]/g, '\\$&')
    .replace(/\*/g, '.*')
    .replace(/\?/g, '.');
  return new RegExp(`^${source}$`).test(environmentId);
}

/** Environment ids codex can put in a path raw (rendezvous.md §1), capped at 128 characters. */
export const ENVIRONMENT_ID_PATTERN = '^[A-Za-z0-9_-]{1,128}$';
