import { environmentIdProblem, isEnvironmentId, isWebSocketUrl, parseRegistryError } from '@tether/exec-protocol';
import { type NoisePublicKey, parsePublicKey, publicKeyToJson, SECURITY_PROFILE_HYBRID_IK_V1 } from '@tether/noise';
import { TetherError } from './errors.js';

/** What `/connect` returns (rendezvous.md §1.3). `url` and `authorization` are credentials. */
export interface RendezvousBundle {
  environmentId: string;
  url: string;
  registrationId: string;
  executorPublicKey: NoisePublicKey;
  authorization: string;
}

export interface RegistryOptions {
  /** `http(s)://HOST[:PORT][/PATH]` */
  registryUrl: string;
  /** Harness API key (`Authorization: Bearer …`). */
  apiKey: string;
  /** Per attempt (default 6 s) and overall (default 14 s), as codex's harness. */
  attemptTimeoutMs?: number;
  totalTimeoutMs?: number;
  fetch?: typeof fetch;
}

const MAX_RETRIES = 4;

export function checkEnvironmentId(environmentId: string): void {
  if (!isEnvironmentId(environmentId)) throw new TetherError('invalid_argument', environmentIdProblem(environmentId));
}

/**
 * Fetches a fresh rendezvous bundle for this harness key. Timeouts and unreachable registries are
 * retried (up to 4 times within the overall deadline); answers are not. Redirects are never followed.
 */
export async function fetchBundle(
  options: RegistryOptions,
  environmentId: string,
  harnessKey: NoisePublicKey,
  signal?: AbortSignal,
): Promise<RendezvousBundle> {
  checkEnvironmentId(environmentId);
  const base = options.registryUrl.trim().replace(/\/+$/, '');
  if (!/^https?:\/\//i.test(base)) {
    throw new TetherError(
      'invalid_argument',
      `invalid registry URL ${JSON.stringify(options.registryUrl)}: use http(s)://`,
    );
  }
  const doFetch = options.fetch ?? fetch;
  const deadline = Date.now() + (options.totalTimeoutMs ?? 14_000);
  let lastError: TetherError | null = null;
  for (let attempt = 0; attempt <= MAX_RETRIES; attempt++) {
    const remaining = deadline - Date.now();
    if (remaining <= 0) break;
    const timeout = AbortSignal.timeout(Math.min(options.attemptTimeoutMs ?? 6_000, remaining));
    let response: Response;
    let text: string;
    try {
      response = await doFetch(`${base}/cloud/environment/${environmentId}/connect`, {
        method: 'POST',
        redirect: 'manual',
        headers: { authorization: `Bearer ${options.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ harness_public_key: publicKeyToJson(harnessKey) }),
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
      text = await response.text();
    } catch (err) {
      if (signal?.aborted) throw new TetherError('closed', 'connect aborted', { cause: err });
      const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).message;
      lastError = new TetherError(
        'registry',
        `cannot reach the registry at ${base}: ${timeout.aborted ? 'timed out' : cause}`,
      );
      await new Promise((resolve) => setTimeout(resolve, Math.min(200 * 2 ** attempt, 2_000)));
      continue;
    }
    if (response.status >= 200 && response.status < 300) return parseBundle(text, environmentId);
    throw answerError(response.status, text, environmentId);
  }
  throw lastError ?? new TetherError('registry', `the registry at ${base} did not answer in time`);
}

function answerError(status: number, text: string, environmentId: string): TetherError {
  const parsed = parseRegistryError(text);
  const code = parsed?.code ?? '';
  const message = parsed?.message?.slice(0, 300) ?? '';
  const detail = `${code ? ` [${code}]` : ''}${message ? `: ${message}` : ''}`;
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
