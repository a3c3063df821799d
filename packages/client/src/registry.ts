import {
  environmentIdProblem,
  isEnvironmentId,
  isLoopbackHost,
  isWebSocketUrl,
  parseRegistryError,
} from '@tether/exec-protocol';
import { type NoisePublicKey, parsePublicKey, publicKeyToJson } from '@tether/noise/keys';
import { SECURITY_PROFILE_HYBRID_IK_V1 } from '@tether/noise/suite';
import type { ProxySettings } from '@tether/outbound';
import { TetherError } from './errors.js';

/** What `/connect` returns (rendezvous.md §1.3). `url` and `authorization` are credentials. */
export interface RendezvousBundle {
  environmentId: string;
  url: string;
  registrationId: string;
  executorPublicKey: NoisePublicKey;
  authorization: string;
  /** The `x-request-id` the `/connect` was sent with (the registry logs it, and again at the executor's validation). */
  requestId?: string;
}

export interface RegistryOptions {
  /** `http(s)://HOST[:PORT][/PATH]` */
  registryUrl: string;
  /** Harness API key (`Authorization: Bearer …`). */
  apiKey: string;
  /** Per attempt (default 6 s) and overall (default 14 s), as codex's harness. */
  attemptTimeoutMs?: number;
  totalTimeoutMs?: number;
  /** Replaces the built-in HTTP client (node:http on Node; in the browser entry, the global `fetch`), e.g. in tests. */
  fetch?: typeof fetch;
  /**
   * The proxies for the registry and relay connections; default: from HTTPS_PROXY, HTTP_PROXY, ALL_PROXY and
   * NO_PROXY as Codex reads them (`@tether/outbound`). `DIRECT` turns them off.
   */
  proxy?: ProxySettings;
  /**
   * Allow a plain `http://` registry on a host that is not loopback. Off by default: the API key and the
   * bundle (the harness authorization, the signed relay URL) would cross the network in clear.
   */
  allowInsecureRegistry?: boolean;
  /**
   * The `x-request-id` of each `/connect` (its retries share it): the registry logs the connect under it and
   * names it again when the executor's `/validate` consumes the authorization, and the executor logs it. Letters,
   * digits and `._:-`, at most 128 (a registry replaces another with its own). Default: a fresh UUID per connect.
   */
  requestId?: string;
}

const MAX_RETRIES = 4;
export interface Answer {
  status: number;
  text: string;
}

export type Post = (url: string, headers: Record<string, string>, body: string, signal: AbortSignal) => Promise<Answer>;

/**
 * How `/connect` is sent for these options and the registry's base URL: the POST, and for messages the proxy it
 * goes through (`via`, e.g. " through the proxy http://…"). Node's (registry-node.ts) honours the proxy
 * settings; `fetchRoute` is the browser entry's.
 */
export type RegistryRoute = (options: RegistryOptions, base: string) => { post: Post; via: string };

export function fetchPost(doFetch: typeof fetch): Post {
  return async (url, headers, body, signal) => {
    const response = await doFetch(url, { method: 'POST', redirect: 'manual', headers, body, signal });
    return { status: response.status, text: await response.text() };
  };
}

/** `/connect` over the options' `fetch`, else the global one (a page's: the browser applies its own proxies). */
export const fetchRoute: RegistryRoute = (options) => ({
  post: fetchPost(options.fetch ?? globalThis.fetch.bind(globalThis)),
  via: '',
});

export function checkEnvironmentId(environmentId: string): void {
  if (!isEnvironmentId(environmentId)) throw new TetherError('invalid_argument', environmentIdProblem(environmentId));
}

/**
 * Refuses a registry URL that is not http(s), and a plain `http://` one whose host is not loopback unless
 * `allowInsecureRegistry`: every `/connect` carries the API key and answers with credentials. Returns the
 * base URL without trailing slashes.
 */
export function checkRegistryUrl(registryUrl: string, allowInsecureRegistry = false): string {
  const base = registryUrl.trim().replace(/\/+$/, '');
  const invalid = () =>
    new TetherError('invalid_argument', `invalid registry URL ${JSON.stringify(registryUrl)}: use http(s)://`);
  if (!/^https?:\/\//i.test(base)) throw invalid();
  let url: URL;
  try {
    url = new URL(base);
  } catch {
    throw invalid();
  }
  if (url.protocol === 'http:' && !allowInsecureRegistry && !isLoopbackHost(url.hostname)) {
    throw new TetherError(
      'invalid_argument',
      `refusing the plain http:// registry at ${url.host}: the API key and the connect bundle would be sent in clear. ` +
        'Use https://, a loopback address, or allow it explicitly (allowInsecureRegistry / --allow-insecure-registry)',
    );
  }
  return base;
}

/** `fetchBundleVia` on one route: each entry's `fetchBundle`. */
export function bundleFetcher(
  route: RegistryRoute,
): (
  options: RegistryOptions,
  environmentId: string,
  harnessKey: NoisePublicKey,
  signal?: AbortSignal,
) => Promise<RendezvousBundle> {
  return (options, environmentId, harnessKey, signal) =>
    fetchBundleVia(route, options, environmentId, harnessKey, signal);
}

/**
 * Fetches a fresh rendezvous bundle for this harness key, over `fetch`. Timeouts and unreachable registries are
 * retried (up to 4 times within the overall deadline); answers are not. Redirects are never followed.
 */
export const fetchBundle = bundleFetcher(fetchRoute);

/** `fetchBundle` with `/connect` sent the way `route` says (default `fetchRoute`). */
export async function fetchBundleVia(
  route: RegistryRoute | undefined,
  options: RegistryOptions,
  environmentId: string,
  harnessKey: NoisePublicKey,
  signal?: AbortSignal,
): Promise<RendezvousBundle> {
  checkEnvironmentId(environmentId);
  const base = checkRegistryUrl(options.registryUrl, options.allowInsecureRegistry);
  const { post, via } = (route ?? fetchRoute)(options, base);
  const requestId = options.requestId ?? crypto.randomUUID();
  const deadline = Date.now() + (options.totalTimeoutMs ?? 14_000);
  let lastError: TetherError | null = null;
  for (let attempt = 0; attempt <= MAX_RETRIES; attempt++) {
    const remaining = deadline - Date.now();
    if (remaining <= 0) break;
    const timeout = AbortSignal.timeout(Math.min(options.attemptTimeoutMs ?? 6_000, remaining));
    let answer: Answer;
    try {
      answer = await post(
        `${base}/cloud/environment/${environmentId}/connect`,
        { authorization: `Bearer ${options.apiKey}`, 'content-type': 'application/json', 'x-request-id': requestId },
        JSON.stringify({ harness_public_key: publicKeyToJson(harnessKey) }),
        signal ? AbortSignal.any([signal, timeout]) : timeout,
      );
    } catch (err) {
      // Given up by the caller (its deadline): what failed before says more than the abort.
      if (signal?.aborted) throw lastError ?? new TetherError('closed', 'connect aborted', { cause: err });
      if (err instanceof TetherError) throw err; // an answer, just not a usable one: not retried
      // node:http puts the OS error's code on the error; fetch puts it on its cause.
      const failure = err as { code?: string; cause?: { code?: string } };
      const cause = failure.cause?.code ?? failure.code ?? (err as Error).message;
      lastError = new TetherError(
        'registry',
        `cannot reach the registry at ${base}${via}: ${timeout.aborted ? 'timed out' : cause}`,
        { cause: err },
      );
      await pause(Math.min(200 * 2 ** attempt, 2_000), signal);
      if (signal?.aborted) throw lastError;
      continue;
    }
    if (answer.status >= 200 && answer.status < 300) return { ...parseBundle(answer.text, environmentId), requestId };
    throw answerError(answer.status, answer.text, environmentId, base);
  }
  throw lastError ?? new TetherError('registry', `the registry at ${base} did not answer in time`);
}

/** Waits `ms`, or less when `signal` aborts meanwhile. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

function answerError(status: number, text: string, environmentId: string, base: string): TetherError {
  const parsed = parseRegistryError(text);
  const code = parsed?.code ?? '';
  const message = parsed?.message?.slice(0, 300) ?? '';
  const detail = `${code ? ` [${code}]` : ''}${message ? `: ${message}` : ''}`;
  const quoted = JSON.stringify(environmentId);
  // The key is fine, the environment is not one it may act on: said so, naming the environment, since the
  // fix is the id (or a key for it), not the key as such.
  if (status === 403 && code === 'forbidden_environment') {
    return new TetherError(
      'unauthorized',
      `environment ${quoted} is not one this API key may use (the registry at ${base} answered HTTP 403 forbidden_environment); check the environment id, or use a key for it`,
      { status },
    );
  }
  // No executor ever registered this id with the registry: for the harness, no such environment.
  if (status === 404 && code === 'environment_not_registered') {
    return new TetherError(
      'not_found',
      `no environment ${quoted} at the registry ${base}: no executor has registered it (HTTP 404 environment_not_registered)`,
      { status },
    );
  }
  if (status === 401 || status === 403) {
    return new TetherError('unauthorized', `the registry refused the harness API key (HTTP ${status})${detail}`, {
      status,
    });
  }
  if (status === 404) {
    return new TetherError('not_found', `environment ${environmentId} has no registered executor (HTTP 404)${detail}`, {
      status,
    });
  }
  if (status === 410) {
    // The environment's registration was revoked (its executor's key, or the registration itself): final
    // until the executor registers again with a valid key, so neither connect nor resume retries it.
    return new TetherError(
      'revoked',
      `environment ${environmentId}'s executor registration was revoked (HTTP 410)${detail}`,
      { status },
    );
  }
  if (status === 409) {
    return new TetherError(
      'offline',
      `environment ${environmentId} is offline: its executor is not on a relay${detail}`,
      {
        status,
      },
    );
  }
  const redirect = status >= 300 && status < 400 ? ' (redirects are not followed)' : '';
  return new TetherError('registry', `the registry answered /connect with HTTP ${status}${redirect}${detail}`, {
    status,
  });
}

function parseBundle(text: string, environmentId: string): RendezvousBundle {
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(text) as Record<string, unknown>;
  } catch {
    throw new TetherError('registry', 'the registry answered /connect with a body that is not JSON');
  }
  const bad = (what: string) => new TetherError('registry', `the registry's bundle is unusable: ${what}`);
  const nonBlank = (value: unknown) => typeof value === 'string' && value.trim() !== '';
  if (body.environment_id !== environmentId) throw bad('environment_id does not match');
  if (body.security_profile !== SECURITY_PROFILE_HYBRID_IK_V1)
    throw bad(`security_profile is not ${SECURITY_PROFILE_HYBRID_IK_V1}`);
  if (!nonBlank(body.url) || !isWebSocketUrl(body.url as string)) throw bad('url is not a ws:// or wss:// URL');
  if (!nonBlank(body.executor_registration_id)) throw bad('executor_registration_id is missing');
  if (!nonBlank(body.harness_key_authorization)) throw bad('harness_key_authorization is missing');
  let executorPublicKey: NoisePublicKey;
  try {
    executorPublicKey = parsePublicKey(body.executor_public_key);
  } catch (err) {
    throw bad(`executor_public_key: ${(err as Error).message}`);
  }
  return {
    environmentId,
    url: body.url as string,
    registrationId: body.executor_registration_id as string,
    executorPublicKey,
    authorization: body.harness_key_authorization as string,
  };
}
