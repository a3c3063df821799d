/**
 * Reaching an environment through the registry and relay: the options, the channels a connection master hands
 * over, and the dialer that fetches a bundle, opens the relay socket and runs the handshake for each connection
 * of a session, with one executor key pin across all of them.
 */
import type { MessageTransport } from '@tether/jsonrpc';
import type { NoiseIdentity, NoisePublicKey } from '@tether/noise';
import type { Dialer } from './client-options.js';
import type { RendezvousPlatform } from './dial.js';
import { ExecutorKeyChangedError, TetherError } from './errors.js';
import { checkRegistryUrl, type RegistryOptions, type RendezvousBundle } from './registry.js';

/**
 * The dialing machinery (WebSocket, relay frames, the secure stream, Noise key generation) is loaded on the
 * first dial: a command whose channel comes from a connection master (`channelSource`) never needs it, and
 * its start-up does not pay for loading it.
 */
export const loadDialing = () => import('./dial.js');

/** How to reach an environment through the registry and relay. */
export interface RendezvousOptions extends RegistryOptions {
  environmentId: string;
  /** The harness's Noise identity, kept for the whole session (default: a fresh one). */
  identity?: NoiseIdentity;
  /**
   * The executor key to trust, pinned up front (e.g. printed by the executor's operator): a bundle naming
   * another key is refused before anything is sent. Without it the key of the session's first successful
   * handshake is pinned, and a reconnect whose bundle names another key fails with ExecutorKeyChangedError.
   */
  executorPublicKey?: NoisePublicKey;
  handshakeTimeoutMs?: number;
  /**
   * Where a connection may come from before a direct one is dialed: e.g. a local connection master holding
   * channels it already set up (`ChannelSource`). Each (re)connect asks it first; null means dial directly.
   */
  channelSource?: ChannelSource;
  /**
   * How the relay socket is opened, the registry called, and the handshake's primitives. The Node entry's
   * default is `ws`, node:http and node:crypto (rendezvous-node.ts); the browser entry has none, a page gives
   * its own.
   */
  platform?: RendezvousPlatform;
}

/** A secure channel to the environment that someone else set up (registry, relay, handshake) and hands over. */
export interface OpenedChannel {
  /** Plaintext JSON-RPC messages of the channel; the executor has not seen `initialize` on it yet. */
  transport: MessageTransport;
  /** The key the executor proved in the channel's handshake: checked against the session's pin. */
  executorPublicKey: NoisePublicKey;
}

/** A source of ready channels (`RendezvousOptions.channelSource`). */
export interface ChannelSource {
  /** A channel, or null to dial directly (no source, or it is broken); a throw fails this attempt. */
  open(signal: AbortSignal): Promise<OpenedChannel | null>;
}

/** Dials an environment through registry and relay, with one key pin across every dial (`rendezvousDialer`). */
export interface RendezvousDialer {
  readonly dial: Dialer;
  readonly pin: {
    /** Throws ExecutorKeyChangedError unless `key` is the pinned one (or nothing is pinned yet). */
    checkKey(key: NoisePublicKey): void;
    /** `key` completed a handshake: pinned from now on if nothing was. */
    trustKey(key: NoisePublicKey): void;
    /** The pinned key, if any. */
    readonly key: NoisePublicKey | null;
  };
}

/**
 * The direct dial of `connectRendezvous`: a fresh bundle, relay socket and handshake per call, one harness
 * identity (generated on the first dial unless given) and one executor key pin for all of them.
 */
export function rendezvousDialer(options: RendezvousOptions): RendezvousDialer {
  checkRegistryUrl(options.registryUrl, options.allowInsecureRegistry);
  let identity = options.identity ?? null;
  const platform = options.platform;
  if (!platform) throw new TetherError('invalid_argument', 'a rendezvous needs a platform here (its relay socket)');
  const pin = new ExecutorKeyPin(options.environmentId, options.executorPublicKey ?? null);
  return {
    dial: async (signal, onPhase) => {
      const dial = await loadDialing();
      identity ??= dial.generateIdentity({
        ...(platform.provider ? { provider: platform.provider } : {}),
        ...(platform.kem ? { kem: platform.kem } : {}),
      });
      return dial.dialRendezvous(
        options,
        options.environmentId,
        identity,
        pin,
        signal,
        options.handshakeTimeoutMs,
        platform,
        onPhase,
      );
    },
    pin,
  };
}

/**
 * A dial that takes a channel from `source` when it has one (the session's key pin applies to it too), else
 * dials directly.
 */
export function channelOrDirect(source: ChannelSource, direct: RendezvousDialer): Dialer {
  return async (signal, onPhase) => {
    onPhase?.('channel');
    const channel = await source.open(signal);
    if (channel === null) return direct.dial(signal, onPhase);
    try {
      direct.pin.checkKey(channel.executorPublicKey);
    } catch (err) {
      channel.transport.close(1000, 'executor key not trusted');
      throw err;
    }
    direct.pin.trustKey(channel.executorPublicKey);
    return channel.transport;
  };
}

/** Byte-wise equality of two public keys, suite included. */
function sameKey(a: NoisePublicKey, b: NoisePublicKey): boolean {
  return (
    a.suite === b.suite &&
    Buffer.from(a.x25519).equals(Buffer.from(b.x25519)) &&
    Buffer.from(a.mlkem768).equals(Buffer.from(b.mlkem768))
  );
}

/**
 * The executor key one session trusts. The registry vouches for the key in each bundle, and a fresh bundle
 * is fetched for every physical connection; without a pin, a registry (or whoever holds its database) could
 * swap the executor between two connections of one session and the harness would resume with the new peer.
 * The first key that completed a handshake (or the one given up front) is the session's; every later
 * bundle must name exactly it, checked before the relay socket is opened.
 */
class ExecutorKeyPin {
  private readonly givenUpFront: boolean;

  constructor(
    private readonly environmentId: string,
    public key: NoisePublicKey | null,
  ) {
    this.givenUpFront = key !== null;
  }

  /** Throws ExecutorKeyChangedError when the bundle names another key than the pinned one. */
  check(bundle: RendezvousBundle): void {
    this.checkKey(bundle.executorPublicKey);
  }

  checkKey(key: NoisePublicKey): void {
    if (this.key === null || sameKey(this.key, key)) return;
    throw new ExecutorKeyChangedError(
      this.givenUpFront
        ? `the registry named an executor key for ${this.environmentId} that is not the pinned one (executorPublicKey); not trusting it`
        : `the executor's key changed during the session with ${this.environmentId}; not trusting it`,
    );
  }

  /** Called once a handshake with the bundle's key succeeded: that key is the session's from now on. */
  trust(bundle: RendezvousBundle): void {
    this.trustKey(bundle.executorPublicKey);
  }

  trustKey(key: NoisePublicKey): void {
    this.key ??= key;
  }
}
