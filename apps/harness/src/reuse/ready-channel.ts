/**
 * A warm process's own channel (src/warm.ts): set up while the warm process waits for a command, so that the
 * command it runs talks to the executor over the relay itself instead of through its master's unix socket. A
 * channel handed out by the master is spliced message by message through the master process: one more hop
 * and process per byte, which made `harness exec -- head -c 256M /dev/zero` through a master 1.3x the time of a
 * direct command (farm-bench, 15 pairs) although it started 80 ms sooner. ssh's master has no such hop for its
 * own client: the process that holds the descriptors holds the connection. Here too: the warm process that
 * will hold the command's descriptors holds its channel.
 *
 * One channel, kept fresh until it is taken: replaced after `maxAgeMs` (well inside the relay's idle timeout),
 * dialed again with backoff when it fails or closes. The master's key pin holds (its spec names the key its
 * channels proved), and the command checks that key against its own pin as for a master's channel.
 */
import { type NoisePublicKey, type OpenedChannel, publicKeyToJson, TetherError } from '@tether/client';
import {
  type ChannelHandlers,
  type ChannelTarget,
  channelDialer,
  DISCARDING_SINK,
  idleSink,
  type Switchable,
  startSwitchable,
} from './channels.js';

type MessageTransport = OpenedChannel['transport'];

/**
 * What a master tells its warm process (one JSON line on fd 3): where to dial, with the key the master pinned
 * (given at start, or proved by its first channel), and under which master.
 */
export interface WarmChannelSpec extends ChannelTarget {
  /** The master's socket path: a command whose own settings name another master does not take this channel. */
  socket: string;
}

/** The spec of the master for `target` on `socket`, whose channels proved `executorPublicKey` (if any yet). */
export function warmChannelSpec(
  target: ChannelTarget,
  executorPublicKey: NoisePublicKey | null,
  socket: string,
): WarmChannelSpec {
  return {
    registryUrl: target.registryUrl,
    environmentId: target.environmentId,
    apiKey: target.apiKey,
    allowInsecureRegistry: target.allowInsecureRegistry,
    executorPublicKey: executorPublicKey ? publicKeyToJson(executorPublicKey) : target.executorPublicKey,
    socket,
  };
}

/** A spec read from the master, or null when `value` is not one. */
export function parseWarmChannelSpec(value: unknown): WarmChannelSpec | null {
  if (typeof value !== 'object' || value === null) return null;
  const spec = value as Partial<WarmChannelSpec>;
  if (
    typeof spec.registryUrl !== 'string' ||
    typeof spec.environmentId !== 'string' ||
    typeof spec.apiKey !== 'string' ||
    typeof spec.allowInsecureRegistry !== 'boolean' ||
    typeof spec.socket !== 'string' ||
    (spec.executorPublicKey !== null && (typeof spec.executorPublicKey !== 'object' || !spec.executorPublicKey))
  ) {
    return null;
  }
  return spec as WarmChannelSpec;
}

export interface ReadyChannelOptions {
  /** A channel older than this is replaced (default 5 minutes, as a master's). */
  maxAgeMs?: number;
  /** One line per event; never given a secret. */
  log: (line: string) => void;
  /** Told whenever a channel becomes ready (true) or is lost while waiting (false). */
  onReady?: (ready: boolean) => void;
  /** How a channel is set up (default: a direct rendezvous dial of the spec, a fresh identity each time). */
  dial?: (signal: AbortSignal) => Promise<OpenedChannel>;
}

const DEFAULT_MAX_AGE_MS = 5 * 60_000;
const RETRY_FIRST_MS = 200;
const RETRY_MAX_MS = 10_000;

/** The direct dial of a spec, as its master dials: a fresh identity per channel, the master's pin. */
function dialSpec(spec: WarmChannelSpec): (signal: AbortSignal) => Promise<OpenedChannel> {
  const dialer = channelDialer(spec);
  return async (signal) => {
    const transport = await dialer.dial(signal);
    const key = dialer.pin.key;
    if (key === null) {
      transport.close(1000, 'no executor key');
      throw new TetherError('connect_failed', 'the channel proved no executor key');
    }
    return { transport, executorPublicKey: key };
  };
}

/** The channel held; its events go to the holder while it waits, to the command once taken. */
interface Held extends Switchable {
  channel: OpenedChannel;
  ageTimer: NodeJS.Timeout;
}

/** One channel set up ahead and kept fresh until `take` (the command's) or `close`. */
export class ReadyChannel {
  private held: Held | null = null;
  private dialing: AbortController | null = null;
  private retryTimer: NodeJS.Timeout | null = null;
  private retryDelay = RETRY_FIRST_MS;
  private ended = false;
  private readonly dial: (signal: AbortSignal) => Promise<OpenedChannel>;

  constructor(
    readonly spec: WarmChannelSpec,
    private readonly options: ReadyChannelOptions,
  ) {
    this.dial = options.dial ?? dialSpec(spec);
  }

  /** Starts setting up the first channel (in the background). */
  start(): this {
    this.fill();
    return this;
  }

  /** Whether a channel is set up and open now. */
  get ready(): boolean {
    return this.held !== null;
  }

  /**
   * The channel, now the caller's (its transport not started yet), or null when none is ready; either way this
   * holder is done: it dials no more.
   */
  take(): OpenedChannel | null {
    const held = this.held;
    this.held = null;
    this.end();
    if (held === null) return null;
    clearTimeout(held.ageTimer);
    const inner = held.channel.transport;
    // Until the command starts the transport, what arrives waits for it (nothing should: the executor speaks
    // when spoken to; a close may).
    const early: Array<(handlers: ChannelHandlers) => void> = [];
    held.sink = {
      onMessage: (data, release) => early.push((handlers) => handlers.onMessage(data, release)),
      onClose: (reason) => early.push((handlers) => handlers.onClose(reason)),
      onDrain: () => undefined,
    };
    let started = false;
    const transport: MessageTransport = {
      kind: inner.kind,
      label: inner.label,
      carriesAttachments: inner.carriesAttachments,
      start: (handlers) => {
        if (started) throw new Error('transport already started');
        started = true;
        held.sink = handlers;
        for (const deliver of early.splice(0)) deliver(handlers);
      },
      send: (message, release) => inner.send(message, release),
      get bufferedAmount() {
        return inner.bufferedAmount;
      },
      pause: () => inner.pause(),
      resume: () => inner.resume(),
      close: (code, reason) => inner.close(code, reason),
    };
    return { transport, executorPublicKey: held.channel.executorPublicKey };
  }

  /** Closes a held channel and stops dialing. */
  close(): void {
    const held = this.held;
    this.held = null;
    this.end();
    if (held) this.drop(held, 'warm process closing');
  }

  private end(): void {
    this.ended = true;
    this.dialing?.abort(new TetherError('closed', 'not needed any more'));
    this.dialing = null;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
  }

  private fill(): void {
    if (this.ended || this.held !== null || this.dialing !== null || this.retryTimer !== null) return;
    const abort = new AbortController();
    this.dialing = abort;
    this.dial(abort.signal).then(
      (channel) => {
        if (this.dialing !== abort) {
          channel.transport.close(1000, 'not needed any more');
          return;
        }
        this.dialing = null;
        this.retryDelay = RETRY_FIRST_MS;
        this.hold(channel);
      },
      (err: unknown) => {
        if (this.dialing !== abort) return;
        this.dialing = null;
        this.options.log(
          `warm process: channel set-up failed (retrying in ${this.retryDelay} ms): ${err instanceof Error ? err.message : String(err)}`,
        );
        this.retryTimer = setTimeout(() => {
          this.retryTimer = null;
          this.fill();
        }, this.retryDelay);
        this.retryDelay = Math.min(this.retryDelay * 2, RETRY_MAX_MS);
      },
    );
  }

  private hold(channel: OpenedChannel): void {
    const held: Held = {
      channel,
      ageTimer: setTimeout(() => this.replace(held, 'replaced (age)'), this.options.maxAgeMs ?? DEFAULT_MAX_AGE_MS),
      sink: idleSink((reason) => this.replace(held, reason)),
    };
    startSwitchable(channel.transport, held);
    this.held = held;
    this.options.onReady?.(true);
  }

  private replace(held: Held, reason: string): void {
    if (this.held !== held) return;
    this.held = null;
    this.options.onReady?.(false);
    this.drop(held, reason);
    this.fill();
  }

  private drop(held: Held, reason: string): void {
    clearTimeout(held.ageTimer);
    held.sink = DISCARDING_SINK;
    held.channel.transport.close(1000, reason);
  }
}

/**
 * A warm process's channel for its master's `spec` (the bundle's export, called by main.js), already dialing;
 * null when `spec` is not one.
 */
export function holdChannel(
  spec: unknown,
  log: (line: string) => void,
  onReady: (ready: boolean) => void,
): ReadyChannel | null {
  const parsed = parseWarmChannelSpec(spec);
  return parsed === null ? null : new ReadyChannel(parsed, { log, onReady }).start();
}
