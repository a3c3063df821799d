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

/**
 * How far back a revocation still matters: a relay URL or authorization minted before it may live this long. The
 * heartbeat answer and the poll both list the revocations within it, so neither depends on when this process
 * started or on the clock of whoever recorded the revocation (only on it being within the window).
 */
export function revocationWindowMs(config: { relayUrlTtlMs: number; authorizationTtlMs: number }): number {
  return Math.max(config.relayUrlTtlMs, config.authorizationTtlMs);
}

/** The default relay URL lifetime: the poll's window when its caller passes none. */
const DEFAULT_WINDOW_MS = 24 * 3600_000;

/** The key of one revocation in the delivered and sending sets (a newline is in neither id). */
const deliveryKey = (r: Pick<RevokedRegistrationRecord, 'environmentId' | 'registrationId'>) =>
  `${r.environmentId}\n${r.registrationId}`;

export interface RevocationPusherOptions {
  relayUrls: readonly string[];
  signingKey: SigningKey;
  log: FastifyBaseLogger;
  now: () => number;
  /** Per-node request timeout; default 2 000 ms. */
  timeoutMs?: number;
}

/** What the pusher knows about one relay node. */
interface NodeState {
  /** Revocations the node answered 2xx for: never sent to it again (bounded; one forgotten is merely re-sent). */
  readonly delivered: BoundedCache<string, true>;
  /** Revocations in a push to it that has not been answered yet: not sent again meanwhile. */
  readonly sending: Set<string>;
  /** Its last push failed: further failures are logged at debug until one succeeds. */
  failing: boolean;
}

/**
 * Tells every configured relay node about revocations, best effort and at least once: a revocation counts as
 * delivered to a node only once that node answered 2xx, and each poll (pollRevocations) sends every node what it
 * has not acknowledged yet. A node that is down or slow is logged and retried on the next poll (it also learns them
 * from its next heartbeat answer); a push never fails the revocation. At most one push per revocation and node is
 * in flight, each bounded by the timeout.
 */
export class RevocationPusher {
  readonly #options: RevocationPusherOptions;
  readonly #inFlight = new Set<Promise<void>>();
  readonly #nodes = new Map<string, NodeState>();

  constructor(options: RevocationPusherOptions) {
    this.#options = options;
    for (const node of options.relayUrls) {
      // Twice the longest list a poll reads, so entries still listed are not the ones forgotten first.
      this.#nodes.set(node, {
        delivered: new BoundedCache(2 * REVOCATION_LIST_CAP),
        sending: new Set(),
        failing: false,
      });
    }
  }

  /** Starts pushing to each node those of `records` it has not acknowledged and is not being sent; returns at once. */
  push(records: readonly RevokedRegistrationRecord[]): void {
    for (const [node, state] of this.#nodes) {
      const keys = new Set<string>();
      const fresh = records.filter((r) => {
        const key = deliveryKey(r);
        if (keys.has(key) || state.delivered.get(key) !== undefined || state.sending.has(key)) return false;
        keys.add(key);
        return true;
      });
      for (let i = 0; i < fresh.length; i += REVOCATION_LIST_CAP) {
        this.#track(this.#send(node, state, fresh.slice(i, i + REVOCATION_LIST_CAP)));
      }
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

  async #send(node: string, state: NodeState, records: readonly RevokedRegistrationRecord[]): Promise<void> {
    const keys = records.map(deliveryKey);
    for (const key of keys) state.sending.add(key);
    try {
      const body = revocationsBody(records, Math.floor(this.#options.now() / 1000));
      const signature = signRevocations(body, this.#options.signingKey);
      const response = await fetch(revocationsEndpoint(node), {
        method: 'POST',
        headers: { 'content-type': 'application/json', [REVOCATIONS_SIGNATURE_HEADER]: signature },
        body,
        signal: AbortSignal.timeout(this.#options.timeoutMs ?? 2_000),
      });
      await response.body?.cancel();
      if (!response.ok)
        return this.#failed(node, state, { status: response.status }, 'relay refused pushed revocations');
      for (const key of keys) state.delivered.set(key, true);
      if (state.failing) this.#options.log.info({ node }, 'pushing revocations to a relay works again');
      state.failing = false;
    } catch (err) {
      this.#failed(node, state, { err: (err as Error).message }, 'pushing revocations to a relay failed');
    } finally {
      for (const key of keys) state.sending.delete(key);
    }
  }

  /** A failed push is retried by the next poll; only the first of a run of failures is a warning. */
  #failed(node: string, state: NodeState, detail: Record<string, unknown>, message: string): void {
    if (state.failing) this.#options.log.debug({ node, ...detail }, message);
    else this.#options.log.warn({ node, ...detail }, `${message} (retried on each poll)`);
    state.failing = true;
  }
}

/**
 * Delivers revocations to every relay node, whoever recorded them (this process, another replica, the `registry
 * keys revoke` CLI with its own clock) and whenever (while this process was down or starting): every poll reads the
 * revocations within the window, newest first and at most REVOCATION_LIST_CAP (the list a heartbeat answer holds),
 * and pushes each node those it has not acknowledged. Returns a stop function.
 */
export function pollRevocations(
  store: RegistryStore,
  pusher: RevocationPusher,
  options: { intervalMs: number; now: () => number; log: FastifyBaseLogger; windowMs?: number },
): () => void {
  const windowMs = options.windowMs ?? DEFAULT_WINDOW_MS;
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    store
      .listRevokedRegistrations(options.now() - windowMs, REVOCATION_LIST_CAP)
      .then((records) => pusher.push(records))
      .catch((err: unknown) => options.log.warn({ err }, 'polling revocations failed'))
      .finally(() => {
        running = false;
      });
  }, options.intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}
