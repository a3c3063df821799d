/**
 * What a connection master and a warm process share about the channels they set up ahead: how each is
 * dialed (a Noise identity of its own, one executor key pin across all), and how one is held unused until a
 * command takes it (its events go to whoever holds it at the time).
 */
import {
  type OpenedChannel,
  parsePublicKeyJson,
  type publicKeyToJson,
  type RendezvousDialer,
  rendezvousDialer,
} from '@tether/client';

type MessageTransport = OpenedChannel['transport'];
export type ChannelHandlers = Parameters<MessageTransport['start']>[0];

/** Where channels are dialed, as a master's spec (and its warm process's) carries it. */
export interface ChannelTarget {
  registryUrl: string;
  environmentId: string;
  apiKey: string;
  allowInsecureRegistry: boolean;
  /** The executor key to pin, as `publicKeyToJson` writes it; null: the first handshake's. */
  executorPublicKey: ReturnType<typeof publicKeyToJson> | null;
}

/**
 * The dialer of a master's (and a warm process's) channels: each channel with a Noise identity of its own, as
 * each command that connects directly has one. The executor lets one harness key start 16 handshakes at once
 * and one more a second (its `/validate` budget), so with one identity for every channel the master could hand
 * out one channel a second, and commands beyond that (a script's loop) were refused a channel and connected
 * directly. The executor key the first handshake pinned (or the one given) holds for every channel.
 */
export function channelDialer(target: ChannelTarget): RendezvousDialer {
  const options = {
    registryUrl: target.registryUrl,
    apiKey: target.apiKey,
    environmentId: target.environmentId,
    allowInsecureRegistry: target.allowInsecureRegistry,
    ...(target.executorPublicKey
      ? { executorPublicKey: parsePublicKeyJson(JSON.stringify(target.executorPublicKey)) }
      : {}),
  };
  const first = rendezvousDialer(options);
  return {
    pin: first.pin,
    dial: (signal, onPhase) => {
      const key = first.pin.key;
      const dialer = key === null ? first : rendezvousDialer({ ...options, executorPublicKey: key });
      return dialer.dial(signal, onPhase);
    },
  };
}

/** A channel whose events go to `sink`, which its holder replaces as the channel changes hands. */
export interface Switchable {
  sink: ChannelHandlers;
}

/** Starts `transport` with handlers that call whatever `holder.sink` is when an event comes. */
export function startSwitchable(transport: MessageTransport, holder: Switchable): void {
  transport.start({
    onMessage: (data, release) => holder.sink.onMessage(data, release),
    onClose: (reason) => holder.sink.onClose(reason),
    onDrain: () => holder.sink.onDrain(),
  });
}

/**
 * The sink of a channel held unused: the executor speaks only when spoken to, so any message means a broken
 * channel, as does a close; `broken` is told which.
 */
export function idleSink(broken: (reason: string) => void): ChannelHandlers {
  return {
    onMessage: (_data, release) => {
      release?.();
      broken('unexpected message on an idle channel');
    },
    onClose: () => broken('closed while idle'),
    onDrain: () => undefined,
  };
}

/** The sink of a channel being dropped: whatever still comes is let go. */
export const DISCARDING_SINK: ChannelHandlers = {
  onMessage: (_data, release) => release?.(),
  onClose: () => undefined,
  onDrain: () => undefined,
};
