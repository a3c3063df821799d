/**
 * Shapes the rendezvous parts agree on (rendezvous.md §1): environment ids, which codex interpolates raw
 * into registry paths, and the relay URLs the registry hands out.
 */

/** ASCII letters, digits, `-` and `_`, 1–128 characters. */
export const ENVIRONMENT_ID_PATTERN = '^[A-Za-z0-9_-]{1,128}$';
const ENVIRONMENT_ID = new RegExp(ENVIRONMENT_ID_PATTERN);

export function isEnvironmentId(value: string): boolean {
  return ENVIRONMENT_ID.test(value);
}

/** The message every part gives for an id it refuses. */
export function environmentIdProblem(value: string): string {
  return `invalid environment id ${JSON.stringify(value)}: use 1-128 ASCII letters, digits, '-' or '_'`;
}

/** A `ws://` or `wss://` URL without a fragment (a relay URL is dialled as is; it is never echoed). */
export function isWebSocketUrl(text: string): boolean {
  try {
    const url = new URL(text);
    return (url.protocol === 'ws:' || url.protocol === 'wss:') && url.hash === '';
  } catch {
    return false;
  }
}

/** `{"error":{"code","message"}}`, the registry's error body (rendezvous.md §1.5); null for anything else. */
export function parseRegistryError(text: string): { code: string | null; message: string | null } | null {
  try {
    const body = JSON.parse(text) as { error?: { code?: unknown; message?: unknown } } | null;
    if (body === null || typeof body !== 'object') return null;
    return {
      code: typeof body.error?.code === 'string' ? body.error.code : null,
      message: typeof body.error?.message === 'string' ? body.error.message : null,
    };
  } catch {
    return null;
  }
}

const LOOPBACK_V4 = /^127\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

/**
 * Whether a URL's or a listener's host is loopback (`localhost`, 127.0.0.0/8, `::1`, `::ffff:127.x.y.z`; a
 * bracketed IPv6 literal, any case, one trailing dot): a registry there is reached, and a listener there is
 * reachable, without crossing the network. The one rule for the harness, the SDK and the executor.
 */
export function isLoopbackHost(host: string): boolean {
  const bare = host
    .replace(/^\[(.*)\]$/, '$1')
    .toLowerCase()
    .replace(/\.$/, '');
  if (bare === 'localhost' || bare === '::1') return true;
  const v4 = LOOPBACK_V4.exec(bare.startsWith('::ffff:') ? bare.slice('::ffff:'.length) : bare);
  return v4?.slice(1).every((octet) => Number(octet) <= 255) === true;
}
