import type { Logger } from 'pino';
import {
  heartbeatRevocations,
  MAX_REVOCATION_BODY_BYTES,
  type Revocation,
  readResponseLimited,
} from './revocations.js';

export interface HeartbeatOptions {
  /** Registry base URL (`http://…`); the relay POSTs `/v1/relay/heartbeat` there. */
  registryUrl: string;
  /**
   * An API key of that registry with the `relay` role (it may only heartbeat; an admin key works too, but the relay
   * needs no more than this).
   */
  token: string;
  /** This node's public URL exactly as the registry is configured with it (`--relay-url`). */
  publicUrl: string;
  intervalMs: number;
  /** Environment ids whose executor socket is connected here now. */
  environments(): string[];
  onResult(ok: boolean): void;
  /** The registrations the registry's answer lists as revoked (none: not called). */
  onRevocations(revocations: Revocation[]): void;
  log: Logger;
}

export interface Heartbeat {
  /** Send soon (debounced): an environment joined or left. */
  kick(): void;
  stop(): Promise<void>;
}

const KICK_DELAY_MS = 50;
const REQUEST_TIMEOUT_MS = 5_000;

/**
 * Presence: reports this node and its connected environments to the registry now, every `intervalMs`,
 * and shortly after each change, one request at a time (a change during a request triggers one more).
 * Each answer lists the registrations revoked within a URL lifetime, so a revocation reaches this node within
 * one interval even when the registry's push to it was lost.
 */
export function startHeartbeat(options: HeartbeatOptions): Heartbeat {
  const endpoint = `${options.registryUrl.replace(/\/+$/, '')}/v1/relay/heartbeat`;
  const abort = new AbortController();
  let stopped = false;
  let inFlight: Promise<void> | null = null;
  let again = false;
  let timer: NodeJS.Timeout | undefined;

  const schedule = (ms: number) => {
    clearTimeout(timer);
    if (!stopped) timer = setTimeout(send, ms);
  };

  const send = () => {
    if (stopped) return;
    if (inFlight) {
      again = true;
      return;
    }
    inFlight = (async () => {
      try {
        const response = await fetch(endpoint, {
          method: 'POST',
          headers: { authorization: `Bearer ${options.token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ url: options.publicUrl, environments: options.environments() }),
          signal: AbortSignal.any([abort.signal, AbortSignal.timeout(REQUEST_TIMEOUT_MS)]),
        });
        if (!response.ok) {
          await response.body?.cancel();
          options.onResult(false);
          options.log.warn({ status: response.status }, 'registry refused the heartbeat');
          return;
        }
        const answer = await readResponseLimited(response.body, MAX_REVOCATION_BODY_BYTES);
        options.onResult(true);
        if (answer === null) {
          options.log.warn(
            { maxBytes: MAX_REVOCATION_BODY_BYTES },
            'heartbeat answer too large; its revocations ignored',
          );
          return;
        }
        const revocations = heartbeatRevocations(answer.toString('utf8'));
        if (revocations.length > 0) options.onRevocations(revocations);
      } catch (err) {
        if (stopped) return;
        options.onResult(false);
        options.log.warn({ err: (err as Error).message }, 'heartbeat to the registry failed');
      }
    })().finally(() => {
      inFlight = null;
      if (again) {
        again = false;
        schedule(KICK_DELAY_MS);
      } else {
        schedule(options.intervalMs);
      }
    });
  };

  send();
  return {
    kick: () => {
      if (stopped) return;
      if (inFlight) again = true;
      else schedule(KICK_DELAY_MS);
    },
    stop: async () => {
      stopped = true;
      clearTimeout(timer);
      abort.abort();
      await inFlight;
      clearTimeout(timer);
    },
  };
}
