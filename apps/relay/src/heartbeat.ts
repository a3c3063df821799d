import type { Logger } from 'pino';

export interface HeartbeatOptions {
  /** Registry base URL (`http://…`); the relay POSTs `/v1/relay/heartbeat` there. */
  registryUrl: string;
  /** An admin API key of that registry (the heartbeat route requires the admin role). */
  token: string;
  /** This node's public URL exactly as the registry is configured with it (`--relay-url`). */
  publicUrl: string;
  intervalMs: number;
  /** Environment ids whose executor socket is connected here now. */
  environments(): string[];
  onResult(ok: boolean): void;
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
        await response.arrayBuffer();
        options.onResult(response.ok);
        if (!response.ok) options.log.warn({ status: response.status }, 'registry refused the heartbeat');
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
