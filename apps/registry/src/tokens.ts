import { createHash, randomBytes } from 'node:crypto';

/** A new random bearer token (32 bytes, base64url) with a recognisable prefix. Shown once, never stored. */
export function generateToken(prefix = 'treg'): string {
  return `${prefix}_${randomBytes(32).toString('base64url')}`;
}

/** SHA-256 hex: what the store keeps in place of API keys and harness authorizations. */
export function hashToken(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

/**
 * Environment-id glob: `*` matches any run (possibly empty), `?` one character; everything else literally.
 * Linear-space, O(pattern × id) worst case: a greedy two-pointer walk that, on a mismatch, backtracks only to the
 * last `*` seen (a backtracking RegExp takes exponential time on patterns like `*a*a*a*a*b`).
 */
export function matchesEnvironmentGlob(pattern: string, environmentId: string): boolean {
  return globMatch(pattern, environmentId).matched;
}

/** matchesEnvironmentGlob with the number of steps it took (the loop's iterations), for tests of its bound. */
export function globMatch(pattern: string, text: string): { matched: boolean; steps: number } {
  let p = 0;
  let t = 0;
  let star = -1; // index in pattern of the last `*` seen
  let resume = 0; // index in text where that `*` would next take one more character
  let steps = 0;
  while (t < text.length) {
    steps++;
    const c = pattern[p];
    if (c === '*') {
      star = p++;
      resume = t;
    } else if (c !== undefined && (c === '?' || c === text[t])) {
      p++;
      t++;
    } else if (star >= 0) {
      p = star + 1;
      t = ++resume;
    } else {
      return { matched: false, steps };
    }
  }
  while (pattern[p] === '*') {
    steps++;
    p++;
  }
  return { matched: p === pattern.length, steps };
}

/** Environment ids codex can put in a path raw (rendezvous.md §1), capped at 128 characters. */
export const ENVIRONMENT_ID_PATTERN = '^[A-Za-z0-9_-]{1,128}$';
