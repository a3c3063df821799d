import {
  REVOCATIONS_PATH,
  REVOCATIONS_SIGNATURE_HEADER,
  type RevocationNotice,
  type SigningKey,
  signRevocations,
} from '@tether/relay-auth';
import type { FastifyBaseLogger } from 'fastify';
import { BoundedCache } from './cache.js';
import type { RegistryStore, RevokedRegistrationRecord } from './store/types.js';

/** At most this many revocations in one heartbeat answer or one push. */
export const REVOCATION_LIST_CAP = 10_000;

/**
 * `ws://host:port/prefix` → `http://host:port/prefix/v1/revocations` (wss → https): where a relay node takes
 * pushed revocations, beside its WebSocket endpoint.
 */
export function revocationsEndpoint(nodeUrl: string): string {
  const url = new URL(nodeUrl);
  if (url.protocol !== 'ws:' && url.protocol !== 'wss:') throw new Error(`not a ws:// or wss:// URL: ${nodeUrl}`);
  url.protocol = url.protocol === 'wss:' ? 'https:' : 'http:';
  url.pathname = `${url.pathname.replace(/\/+$/, '')}${REVOCATIONS_PATH}`;
  url.search = '';
  url.hash = '';
  return url.toString();
}

/** The pushed body's bytes (the exact bytes signed). */
export function revocationsBody(records: readonly RevokedRegistrationRecord[], issuedAtSeconds: number): string {
  const notice: RevocationNotice = {
    revoked_registrations: records.map((r) => ({ environment_id: r.environmentId, registration_id: r.registrationId })),
    issued_at: issuedAtSeconds,
  };
  return JSON.stringify(notice);
}

export interface RevocationPusherOptions {
  relayUrls: readonly string[];
  signingKey: SigningKey;
  log: FastifyBaseLogger;
  now: () => number;
  /** Per-node request timeout; default 2 000 ms. */
  timeoutMs?: number;
}

/**
 * Tells every configured relay node about revocations at once, best effort: a node that is down or slow is logged
 * and skipped (it learns them from its next heartbeat answer), and a push never fails the revocation.
 */
export class RevocationPusher {
  readonly #options: RevocationPusherOptions;
  readonly #inFlight = new Set<Promise<void>>();
  /** Registrations already pushed, so the poll for other processes' revocations does not push them again. */
  readonly #pushed = new BoundedCache<string, true>(REVOCATION_LIST_CAP);

  constructor(options: RevocationPusherOptions) {
    this.#options = options;
  }

  /** Starts pushing `records` (those not pushed before) to every node; returns at once. */
  push(records: readonly RevokedRegistrationRecord[]): void {
    const fresh = records.filter((r) => this.#pushed.get(r.registrationId) === undefined);
    if (fresh.length === 0) return;
    for (const r of fresh) this.#pushed.set(r.registrationId, true);
    for (let i = 0; i < fresh.length; i += REVOCATION_LIST_CAP) {
      const body = revocationsBody(fresh.slice(i, i + REVOCATION_LIST_CAP), Math.floor(this.#options.now() / 1000));
      const signature = signRevocations(body, this.#options.signingKey);
      for (const node of this.#options.relayUrls) this.#track(this.#send(node, body, signature));
    }
  }

  /** Resolves once every push started so far has finished (each is bounded by the timeout). */
  async settled(): Promise<void> {
    while (this.#inFlight.size > 0) await Promise.all([...this.#inFlight]);
  }

  #track(push: Promise<void>): void {
    this.#inFlight.add(push);
    void push.finally(() => this.#inFlight.delete(push));
  }

  async #send(node: string, body: string, signature: string): Promise<void> {
    try {
      const response = await fetch(revocationsEndpoint(node), {
        method: 'POST',
        headers: { 'content-type': 'application/json', [REVOCATIONS_SIGNATURE_HEADER]: signature },
        body,
        signal: AbortSignal.timeout(this.#options.timeoutMs ?? 2_000),
      });
      await response.body?.cancel();
      if (!response.ok) this.#options.log.warn({ node, status: response.status }, 'relay refused pushed revocations');
    } catch (err) {
      this.#options.log.warn({ node, err: (err as Error).message }, 'pushing revocations to a relay failed');
    }
  }
}

/**
 * Revocations made elsewhere (the `registry keys revoke` CLI, another replica) reach this process only through the
 * store: poll for ones newer than the last seen and push them. Returns a stop function.
 */
export function pollRevocations(
  store: RegistryStore,
  pusher: RevocationPusher,
  options: { intervalMs: number; now: () => number; log: FastifyBaseLogger },
): () => void {
  let since = options.now();
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    store
      .listRevokedRegistrations(since, REVOCATION_LIST_CAP)
      .then((records) => {
        // Same-millisecond revocations may land after a poll: re-read the last millisecond (pushes dedupe).
        for (const r of records) since = Math.max(since, r.revokedAt);
        pusher.push(records);
      })
      .catch((err: unknown) => options.log.warn({ err }, 'polling revocations failed'))
      .finally(() => {
        running = false;
      });
  }, options.intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
