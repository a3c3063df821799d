/** What a page connects with: an environment and a credential (an API key, or a grant's session token). */
export interface SignIn {
  environmentId: string;
  credential: string;
  /** A share link's session: it reaches only the process shared with it, at most with this access. */
  shareAccess?: 'view' | 'control';
}

const STORAGE_KEY = 'tether.sign-in';

/**
 * The sign-in the user asked the tab to remember: in session storage (this tab only, gone when it closes),
 * never local storage. Without that choice the credential lives only in the page's memory.
 */
export const signInStore = {
  save(signIn: SignIn): void {
    sessionStorage.setItem(STORAGE_KEY, JSON.stringify(signIn));
  },
  load(): SignIn | null {
    const raw = sessionStorage.getItem(STORAGE_KEY);
    if (raw === null) return null;
    try {
      const parsed = JSON.parse(raw) as Partial<SignIn>;
      if (typeof parsed.environmentId === 'string' && typeof parsed.credential === 'string') {
        return { environmentId: parsed.environmentId, credential: parsed.credential };
      }
    } catch {
      // Not ours: dropped below.
    }
    sessionStorage.removeItem(STORAGE_KEY);
    return null;
  },
  clear(): void {
    sessionStorage.removeItem(STORAGE_KEY);
  },
};

/**
 * `#env=…&grant=…` of a sign-in link (`harness login --web`), or of a bookmark (`#env=…`); a share link
 * (`harness share`) adds `process=…&share=…` (the shared process and its token).
 */
export function readHashParams(hash: string): { env?: string; grant?: string; process?: string; share?: string } {
  const params = new URLSearchParams(hash.replace(/^#/, ''));
  const out: { env?: string; grant?: string; process?: string; share?: string } = {};
  for (const name of ['env', 'grant', 'process', 'share'] as const) {
    const value = params.get(name);
    if (value) out[name] = value;
  }
  return out;
}

/** A one-time grant from a sign-in link, exchanged at the registry for a session token of one environment. */
export async function exchangeGrant(registryUrl: string, grant: string): Promise<SignIn> {
  const response = await fetch(`${registryUrl}/cloud/browser-grants/exchange`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ grant }),
    redirect: 'error',
  });
  let body: Record<string, unknown> = {};
  try {
    body = (await response.json()) as Record<string, unknown>;
  } catch {
    // Described by the status below.
  }
  if (!response.ok) {
    const error = body.error as { message?: unknown } | undefined;
    const detail = typeof error?.message === 'string' ? `: ${error.message.slice(0, 200)}` : '';
    throw new Error(`the sign-in link was refused (HTTP ${response.status})${detail}; ask for a new one`);
  }
  if (typeof body.token !== 'string' || typeof body.environment_id !== 'string') {
    throw new Error('the registry answered the sign-in link with something that is not a session');
  }
  return {
    environmentId: body.environment_id,
    credential: body.token,
    ...(body.share_access === 'view' || body.share_access === 'control' ? { shareAccess: body.share_access } : {}),
  };
}
