import { environmentIdProblem, isEnvironmentId, isWebSocketUrl, parseRegistryError } from '@tether/exec-protocol';
import type { NoisePublicKey } from '@tether/noise';
import { publicKeyToJson, SECURITY_PROFILE_HYBRID_IK_V1 } from '@tether/noise';
import { keyPrincipal, type Principal, UNATTRIBUTED_PRINCIPAL } from '../principal.js';

/** Per attempt: headers and body (rendezvous.md §1.5). */
export const REGISTRY_TIMEOUT_MS = 10_000;
/** Error bodies are read at most this far; never logged whole. */
const ERROR_BODY_PREVIEW = 4096;

/** A registry answer the executor cannot use. `retryable` only for the two codes codex retries. */
export class RegistryError extends Error {
  override readonly name = 'RegistryError';
  constructor(
    message: string,
    readonly status: number | null,
    readonly code: string | null,
    readonly retryable: boolean,
  ) {
    super(message);
  }
}

export interface Registration {
  environmentId: string;
  /** The signed relay URL with `role=environment`; a credential, never logged. */
  url: string;
  registrationId: string;
}

export interface RegistryClientOptions {
  /** Base URL, e.g. `http://127.0.0.1:8080` (trailing `/` trimmed). */
  baseUrl: string;
  /** Bearer token; never appears in errors or logs. */
  apiKey: string;
  timeoutMs?: number;
  fetch?: typeof fetch;
}

export function checkEnvironmentId(environmentId: string): void {
  if (!isEnvironmentId(environmentId)) throw new RegistryError(environmentIdProblem(environmentId), null, null, false);
}

/** Parses and normalizes a registry base URL; throws a message fit for the CLI. */
export function parseRegistryUrl(value: string): string {
  let url: URL;
  try {
    url = new URL(value.trim());
  } catch {
    throw new Error(`invalid registry URL ${JSON.stringify(value)}: expected http(s)://HOST[:PORT][/PATH]`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new Error(`invalid registry URL ${JSON.stringify(value)}: the scheme must be http or https`);
  }
  if (url.username || url.password) throw new Error('the registry URL must not carry credentials');
  if (url.search || url.hash) throw new Error('the registry URL must not have a query or fragment');
  return url.toString().replace(/\/+$/, '');
}

/** The header a Tether registry's `/validate` answer names the harness's `/connect` request id in. */
export const CONNECT_REQUEST_ID_HEADER = 'x-tether-connect-request-id';

/**
 * The headers a Tether registry's yes to `/validate` names the API key that minted the authorization in (its id,
 * percent-encoded, and its role): who the harness acts for (principal.ts). Codex's registry sends neither.
 */
export const HARNESS_KEY_ID_HEADER = 'x-tether-harness-key-id';
export const HARNESS_KEY_ROLE_HEADER = 'x-tether-harness-key-role';
/** `view`: that key is view-only (its harness may only watch processes shared with it). */
export const HARNESS_KEY_ACCESS_HEADER = 'x-tether-harness-key-access';
/** A share link's browser session: its id, and `view` or `control` (the most it may do, by shares only). */
export const HARNESS_LINK_SESSION_HEADER = 'x-tether-harness-link-session';
export const HARNESS_LINK_ACCESS_HEADER = 'x-tether-harness-link-access';

/**
 * A `/validate` that said yes: the request id of the harness's `/connect` when the registry gave one, and who the
 * harness acts for (the key the registry named, else unattributed).
 */
export interface HarnessValidation {
  connectRequestId: string | null;
  principal: Principal;
}

/**
 * The principal a `/validate` yes names: both headers well formed (an id of 1 to 256 characters once decoded, a
 * role that may `/connect`), else unattributed.
 */
export function principalFromHeaders(headers: Headers): Principal {
  const encoded = headers.get(HARNESS_KEY_ID_HEADER);
  const role = headers.get(HARNESS_KEY_ROLE_HEADER);
  if (encoded === null || (role !== 'harness' && role !== 'admin')) return UNATTRIBUTED_PRINCIPAL;
  let keyId: string;
  try {
    keyId = decodeURIComponent(encoded);
  } catch {
    return UNATTRIBUTED_PRINCIPAL;
  }
  if (keyId.length < 1 || keyId.length > 256) return UNATTRIBUTED_PRINCIPAL;
  const link = headers.get(HARNESS_LINK_SESSION_HEADER);
  const linkAccess = headers.get(HARNESS_LINK_ACCESS_HEADER);
  // A link session named without a well-formed id or access is refused everything a link may not do: view only.
  const linkId = link !== null && /^[A-Za-z0-9_-]{1,64}$/.test(link) ? link : link === null ? undefined : 'malformed';
  const viewOnly =
    headers.get(HARNESS_KEY_ACCESS_HEADER) === 'view' || (linkId !== undefined && linkAccess !== 'control');
  return keyPrincipal(keyId, role, viewOnly, linkId);
}

/** A request id fit for a log line (the registry's own rule), else null. */
function requestId(value: string | null): string | null {
  return value !== null && /^[A-Za-z0-9._:-]{1,128}$/.test(value) ? value : null;
}

/**
 * The executor's side of the registry API (rendezvous.md §1.2, §1.4): register the executor key and
 * ask whether a harness may in. Redirects are never followed, so the bearer cannot leak to another host.
 */
export class RegistryClient {
  private readonly baseUrl: string;
  private readonly apiKey: string;
  private readonly timeoutMs: number;
  private readonly fetch: typeof fetch;

  constructor(options: RegistryClientOptions) {
    this.baseUrl = parseRegistryUrl(options.baseUrl);
    this.apiKey = options.apiKey;
    this.timeoutMs = options.timeoutMs ?? REGISTRY_TIMEOUT_MS;
    this.fetch = options.fetch ?? fetch;
  }

  /**
   * `unreachableRelay`: the relay node (a base URL, never a signed one) this executor is failing over from. Sent as
   * Tether's `unreachable_relay_url` so the registry picks another live node; a registry that refuses the field
   * (400: a strict one of another make) is asked again without it.
   */
  async register(environmentId: string, executorKey: NoisePublicKey, unreachableRelay?: string): Promise<Registration> {
    checkEnvironmentId(environmentId);
    const path = `/cloud/environment/${environmentId}/register`;
    const payload = {
      security_profile: SECURITY_PROFILE_HYBRID_IK_V1,
      executor_public_key: publicKeyToJson(executorKey),
    };
    let body: unknown;
    try {
      body = await this.post(
        path,
        unreachableRelay ? { ...payload, unreachable_relay_url: unreachableRelay } : payload,
      );
    } catch (err) {
      if (!unreachableRelay || !(err instanceof RegistryError) || err.status !== 400) throw err;
      body = await this.post(path, payload);
    }
    const answer = body as Partial<Record<string, unknown>>;
    const problem = (what: string) =>
      new RegistryError(`the registry's /register answer is unusable: ${what}`, 200, null, false);
    if (answer.environment_id !== environmentId) throw problem('environment_id does not match');
    if (answer.security_profile !== SECURITY_PROFILE_HYBRID_IK_V1) {
      throw problem(`security_profile is not ${SECURITY_PROFILE_HYBRID_IK_V1}`);
    }
    if (typeof answer.url !== 'string' || answer.url.trim() === '') throw problem('url is missing');
    if (!isWebSocketUrl(answer.url)) throw problem('url is not a ws:// or wss:// URL');
    if (typeof answer.executor_registration_id !== 'string' || answer.executor_registration_id.trim() === '') {
      throw problem('executor_registration_id is missing');
    }
    return { environmentId, url: answer.url, registrationId: answer.executor_registration_id };
  }

  /**
   * Yes only for a 2xx answer with `valid: true`; every failure is a plain no, `false` (and is not detailed).
   * A yes carries the harness's `/connect` request id and the key that minted its authorization from a Tether
   * registry (a Codex one sends neither: its harnesses are unattributed).
   */
  async validate(
    environmentId: string,
    request: { registrationId: string; harnessKey: NoisePublicKey; authorization: string },
    signal?: AbortSignal,
  ): Promise<HarnessValidation | false> {
    try {
      const { body, headers } = await this.exchange(
        `/cloud/environment/${environmentId}/validate`,
        {
          executor_registration_id: request.registrationId,
          harness_public_key: publicKeyToJson(request.harnessKey),
          harness_key_authorization: request.authorization,
        },
        signal,
      );
      if ((body as { valid?: unknown } | null)?.valid !== true) return false;
      return {
        connectRequestId: requestId(headers.get(CONNECT_REQUEST_ID_HEADER)),
        principal: principalFromHeaders(headers),
      };
    } catch {
      return false;
    }
  }

  private async post(path: string, payload: unknown, signal?: AbortSignal): Promise<unknown> {
    return (await this.exchange(path, payload, signal)).body;
  }

  private async exchange(
    path: string,
    payload: unknown,
    signal?: AbortSignal,
  ): Promise<{ body: unknown; headers: Headers }> {
    const timeout = AbortSignal.timeout(this.timeoutMs);
    let response: Response;
    try {
      response = await this.fetch(`${this.baseUrl}${path}`, {
        method: 'POST',
        redirect: 'manual',
        headers: { authorization: `Bearer ${this.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify(payload),
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
    } catch (err) {
      const reason = timeout.aborted ? `no answer within ${this.timeoutMs} ms` : describeFetchError(err);
      throw new RegistryError(`cannot reach the registry at ${this.baseUrl}: ${reason}`, null, null, true);
    }
    const text = await readText(response, timeout);
    if (response.status >= 200 && response.status < 300) {
      try {
        return { body: JSON.parse(text) as unknown, headers: response.headers };
      } catch {
        throw new RegistryError(
          `the registry answered ${path} with a body that is not JSON`,
          response.status,
          null,
          false,
        );
      }
    }
    const { code, message } = parseErrorBody(text);
    const retryable =
      (response.status === 503 && code === 'registration_conflict') ||
      (response.status === 502 && code === 'authentication_service_unavailable');
    let summary = `the registry refused ${path.replace(/^\/cloud\/environment\/[^/]+/, '')} with HTTP ${response.status}`;
    if (response.status === 401 || response.status === 403) summary += ' (authentication failed: check the API key)';
    if (response.status >= 300 && response.status < 400) summary += ' (redirects are not followed)';
    if (code) summary += ` [${code}]`;
    if (message) summary += `: ${message}`;
    throw new RegistryError(summary, response.status, code, retryable);
  }
}

async function readText(response: Response, timeout: AbortSignal): Promise<string> {
  try {
    return await response.text();
  } catch (err) {
    const reason = timeout.aborted ? 'timed out' : describeFetchError(err);
    throw new RegistryError(`the registry's answer was cut off: ${reason}`, response.status, null, true);
  }
}

function parseErrorBody(text: string): { code: string | null; message: string | null } {
  const parsed = parseRegistryError(text);
  if (parsed) return { code: parsed.code, message: parsed.message?.slice(0, 512) ?? null };
  const preview = text.slice(0, ERROR_BODY_PREVIEW).replace(/\s+/g, ' ').trim();
  return { code: null, message: preview === '' ? null : preview.slice(0, 200) };
}

function describeFetchError(err: unknown): string {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (err as Error).message;
}
