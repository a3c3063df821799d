import type { Socket } from 'node:net';
import type { RelayGrant } from '@tether/relay-auth';
import { decodeFrame, encodeFrame, type Frame, peekHeaderParts, resetFrame, streamKey } from '@tether/relay-frames';
import { joinParts } from '@tether/user-read/websocket';
import type { Logger } from 'pino';
import type { WebSocket } from 'ws';
import type { Clock } from './clock.js';
import { CLOSE, type RelayLimits } from './limits.js';
import { ExpiringMap } from './memory.js';
import {
  DROP_REASONS,
  type DropReason,
  RESET_REASONS,
  type RelayMetrics,
  type ResetReason,
  type RevocationSource,
} from './metrics.js';
import { OPEN, Peer, type PeerContext } from './peer.js';
import { type Revocation, revocationKey } from './revocations.js';

export type Direction = 'to_environment' | 'to_harness';

export interface RelayStats {
  environments: number;
  harnessSockets: number;
  streams: number;
  /** Bytes queued by the relay in its sockets' write buffers, by destination role. */
  queuedBytes: { environment: number; harness: number };
  pausedHarnessSockets: number;
}

/** A harness socket's place in its grant's counts (admission.ts), given up once its stream is claimed or it closes. */
export interface UnclaimedHold {
  settle(): void;
}

export interface PairingOptions {
  limits: RelayLimits;
  clock: Clock;
  log: Logger;
  metrics: RelayMetrics;
  peers: PeerContext;
  /** Observer of every forwarded message (capture); see RelayOptions.tap. */
  tap?: ((direction: Direction, data: Buffer) => void) | undefined;
  /** An environment joined or left (the presence heartbeat reports it soon). */
  onEnvironmentsChanged(): void;
}

interface EnvironmentPeer {
  readonly peer: Peer;
  readonly environmentId: string;
  readonly registrationId: string;
  /** The grant's registration epoch: a socket with a lower one for this environment is refused. */
  readonly epoch: number;
  /** stream key (stream_id bytes) → the harness socket that claimed it. */
  readonly streams: Map<string, HarnessPeer>;
}

/** A claimed stream: the id its `Resume` named, on the environment socket it was claimed on. */
interface Stream {
  readonly id: string;
  readonly key: string;
  readonly env: EnvironmentPeer;
  /** Epoch ms of the last frame either way (the idle timeout). */
  lastActivity: number;
  /** The harness sent a Reset: no second one (`harness_closed`) when its socket closes. */
  resetSent: boolean;
}

/**
 * Where a harness socket is: `unclaimed` (no `Resume` yet), `claimed` (its stream is in its environment's table,
 * the environment has not answered: the handshake frame count and deadline run), `answered` (the environment has
 * sent a frame on it), `closing` (the relay closed it or is closing it: out of every table, nothing more is read).
 * A claimed or answered harness is exactly one in its environment's `streams`.
 */
type HarnessState =
  | { readonly kind: 'unclaimed'; readonly since: number }
  | { readonly kind: 'claimed'; readonly stream: Stream; handshakeFrames: number; readonly deadline: NodeJS.Timeout }
  | { readonly kind: 'answered'; readonly stream: Stream }
  | { readonly kind: 'closing' };

interface HarnessPeer {
  readonly peer: Peer;
  readonly hold: UnclaimedHold;
  readonly environmentId: string;
  readonly registrationId: string;
  state: HarnessState;
}

const BINARY = Object.freeze({ binary: true });
const CLOSING: HarnessState = Object.freeze({ kind: 'closing' });

/**
 * The pairing table: every environment socket by environment, every harness socket, the streams between them,
 * and each transition of a stream (claim, answer, reset, close), with the bounded memories that outlive a socket
 * (revoked registrations, environments' newest epochs). Sockets themselves (liveness, backpressure, close
 * grace) are peers (peer.ts); the upgrade that admits them is admission.ts's.
 */
export class PairingTable {
  readonly #environments = new Map<string, EnvironmentPeer>();
  readonly #harnesses = new Set<HarnessPeer>();
  // Highest environment-socket epoch seen per environment, kept after the socket leaves so a stale executor cannot
  // take the place of a briefly disconnected current one. A URL with a lower epoch was minted before the newer
  // registration existed, so it has expired once the entry has (urlLifetimeMs after it was last seen).
  readonly #epochs: ExpiringMap<number>;
  // Revoked registrations (revocationKey), refused until every URL naming them could have expired anyway.
  readonly #revoked: ExpiringMap<true>;
  readonly #limits: RelayLimits;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #metrics: RelayMetrics;
  readonly #tap: PairingOptions['tap'];
  readonly #fastPath: PeerContext['fastPath'];
  readonly #options: PairingOptions;
  readonly #resets: Record<ResetReason, { inc(): void }>;
  readonly #drops: Record<DropReason, { inc(): void }>;
  readonly #framesTo: Record<Direction, { inc(): void }>;
  readonly #bytesTo: Record<Direction, { inc(by: number): void }>;
  readonly #pauses: { inc(): void };
  readonly #pingTimer: NodeJS.Timeout;
  readonly #sweepTimer: NodeJS.Timeout;

  constructor(options: PairingOptions) {
    const { limits, metrics } = options;
    this.#options = options;
    this.#limits = limits;
    this.#clock = options.clock;
    this.#log = options.log;
    this.#metrics = metrics;
    this.#tap = options.tap;
    this.#fastPath = options.peers.fastPath;
    this.#epochs = new ExpiringMap(limits.maxRememberedRegistrations, limits.urlLifetimeMs);
    this.#revoked = new ExpiringMap(limits.maxRememberedRegistrations, limits.urlLifetimeMs);
    const by = <K extends string>(keys: readonly K[], series: (key: K) => { inc(by?: number): void }) =>
      Object.fromEntries(keys.map((key) => [key, series(key)])) as Record<K, { inc(by?: number): void }>;
    this.#resets = by(RESET_REASONS, (reason) => metrics.counter('relay_resets_total', { reason }));
    this.#drops = by(DROP_REASONS, (reason) => metrics.counter('relay_drops_total', { reason }));
    const directions = ['to_environment', 'to_harness'] as const;
    this.#framesTo = by(directions, (direction) => metrics.counter('relay_forwarded_frames_total', { direction }));
    this.#bytesTo = by(directions, (direction) => metrics.counter('relay_forwarded_bytes_total', { direction }));
    this.#pauses = metrics.counter('relay_backpressure_pauses_total');
    this.#pingTimer = setInterval(() => this.#keepAlive(), limits.pingIntervalMs);
    const sweepMs = Math.max(
      10,
      Math.min(5_000, Math.floor(Math.min(limits.idleTimeoutMs, limits.claimTimeoutMs) / 4)),
    );
    this.#sweepTimer = setInterval(() => this.#sweep(), sweepMs);
  }

  /** A socket error: counted (ws closes the socket itself). */
  readonly onSocketError = (err: Error & { code?: string }): void => {
    if (err.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH') this.#drops.oversize_message.inc();
    else if (err.code?.startsWith('WS_ERR_')) this.#drops.malformed_frame.inc();
  };

  /** Environment ids whose executor socket is connected here. */
  environmentIds(): string[] {
    return [...this.#environments.keys()];
  }

  // Admission ---------------------------------------------------------------------------------------------------

  /** Whether the registration was revoked (within a URL lifetime). */
  isRevoked(environmentId: string, registrationId: string): boolean {
    return this.#revoked.get(revocationKey(environmentId, registrationId), this.#clock()) !== undefined;
  }

  /** The highest epoch seen for the environment: its connected socket's, or remembered from an earlier one. */
  newestEpoch(environmentId: string): number {
    const connected = this.#environments.get(environmentId)?.epoch ?? -1;
    return Math.max(connected, this.#epochs.get(environmentId, this.#clock()) ?? -1);
  }

  #rememberEpoch(environmentId: string, epoch: number) {
    const at = this.#clock();
    const forgotten = this.#epochs.set(environmentId, Math.max(epoch, this.#epochs.get(environmentId, at) ?? -1), at);
    if (forgotten > 0) this.#metrics.counter('relay_forgotten_total', { table: 'epochs' }).inc(forgotten);
  }

  // Environment sockets -----------------------------------------------------------------------------------------

  /** An admitted environment socket: it replaces the environment's current one (admission refused older epochs). */
  attachEnvironment(ws: WebSocket, socket: Socket, grant: RelayGrant): void {
    const env: EnvironmentPeer = {
      peer: new Peer(ws, socket, this.#options.peers),
      environmentId: grant.environmentId,
      registrationId: grant.registrationId,
      epoch: grant.epoch,
      streams: new Map(),
    };
    const previous = this.#environments.get(env.environmentId);
    this.#environments.set(env.environmentId, env);
    this.#rememberEpoch(env.environmentId, env.epoch);
    if (previous) {
      this.#log.info({ environmentId: env.environmentId }, 'environment socket replaced');
      this.#endEnvironment(previous, 'environment_replaced');
      // Only a newer registration supersedes the executor for good (4001: it stops). A socket of the same
      // registration (its own reconnect, or a replayed URL) is told apart (4011), so that it reconnects.
      if (env.epoch > previous.epoch) previous.peer.ws.close(CLOSE.REPLACED, 'replaced by a newer registration');
      else previous.peer.ws.close(CLOSE.REPLACED_SAME_REGISTRATION, 'replaced by a socket of the same registration');
    } else {
      this.#log.info({ environmentId: env.environmentId }, 'environment connected');
    }
    this.#options.onEnvironmentsChanged();
    env.peer.listen(
      (parts, length, isBinary) => this.#onEnvironmentMessage(env, parts, length, isBinary),
      () => this.#onEnvironmentClose(env),
    );
  }

  #onEnvironmentClose(env: EnvironmentPeer) {
    if (this.#environments.get(env.environmentId) === env) {
      this.#environments.delete(env.environmentId);
      // From now on only the remembered epoch keeps an older executor out: it starts a full lifetime here.
      this.#rememberEpoch(env.environmentId, env.epoch);
      this.#log.info({ environmentId: env.environmentId }, 'environment disconnected');
      this.#options.onEnvironmentsChanged();
    }
    this.#endEnvironment(env, 'environment_closed');
  }

  /** Every harness of a gone (or replaced, or revoked) environment socket gets Reset and is closed. */
  #endEnvironment(env: EnvironmentPeer, reason: ResetReason, code: number = CLOSE.GOING_AWAY) {
    for (const harness of [...env.streams.values()]) {
      const { state } = harness;
      if (state.kind !== 'claimed' && state.kind !== 'answered') continue;
      this.#resets[reason].inc();
      sendReset(harness.peer.ws, state.stream.id, reason);
      this.#closeHarness(harness, code, reason);
    }
    env.streams.clear();
    env.peer.releaseAll();
  }

  #onEnvironmentMessage(env: EnvironmentPeer, parts: Buffer[], length: number, isBinary: boolean) {
    const at = env.peer.seen();
    if (!isBinary) {
      this.#drops.text_message.inc();
      env.peer.ws.close(CLOSE.TEXT, 'binary frames only');
      return;
    }
    const header = peekHeaderParts(parts, length);
    if (!header) return this.#drops.malformed_frame.inc();
    const harness = env.streams.get(header.streamKey);
    const state = harness?.state;
    // A socket already closing (its close event pending) counts as gone: ws would only account the bytes.
    if (!harness || !state || state.kind === 'closing' || state.kind === 'unclaimed' || !harness.peer.open) {
      return this.#drops.unknown_stream.inc();
    }
    const stream = state.stream;
    if (state.kind === 'claimed') {
      clearTimeout(state.deadline);
      harness.state = { kind: 'answered', stream };
    }
    stream.lastActivity = at;
    const ws = harness.peer.ws;
    if (this.#tap) this.#tap('to_harness', joinParts(parts, length));
    this.#fastPath.sendParts(ws, parts, length);
    this.#framesTo.to_harness.inc();
    this.#bytesTo.to_harness.inc(length);
    if (header.kind === 'reset') {
      // The executor ended the stream: it is over at the relay too.
      this.#closeHarness(harness, CLOSE.STREAM_RESET, 'stream reset by the environment');
    } else if (ws.bufferedAmount > this.#limits.harnessMaxBufferedBytes) {
      // This harness cannot keep up; it must not hold the environment's other streams hostage.
      this.#resetStream(harness, 'relay_backpressure', CLOSE.BACKPRESSURE);
    }
  }

  // Harness sockets ---------------------------------------------------------------------------------------------

  /** An admitted harness socket: unclaimed until its first frame, a `Resume`, claims a stream. */
  attachHarness(ws: WebSocket, socket: Socket, grant: RelayGrant, hold: UnclaimedHold): void {
    const peer = new Peer(ws, socket, this.#options.peers);
    const harness: HarnessPeer = {
      peer,
      hold,
      environmentId: grant.environmentId,
      registrationId: grant.registrationId,
      state: { kind: 'unclaimed', since: peer.lastSeen },
    };
    this.#harnesses.add(harness);
    peer.listen(
      (parts, length, isBinary) => this.#onHarnessMessage(harness, parts, length, isBinary),
      () => this.#onHarnessClose(harness),
    );
  }

  #onHarnessMessage(harness: HarnessPeer, parts: Buffer[], length: number, isBinary: boolean) {
    const at = harness.peer.seen();
    const state = harness.state;
    if (state.kind === 'closing') return;
    if (!isBinary) {
      this.#drops.text_message.inc();
      return this.#resetStream(harness, 'protocol_error', CLOSE.TEXT);
    }
    if (state.kind === 'unclaimed') return this.#claim(harness, parts, length);
    const stream = state.stream;
    const header = peekHeaderParts(parts, length);
    if (!header || header.streamKey !== stream.key) {
      // A harness socket carries exactly its own stream; anything else is refused, never routed.
      this.#drops.malformed_frame.inc();
      return this.#resetStream(harness, 'protocol_error', CLOSE.PROTOCOL);
    }
    if (state.kind === 'claimed' && ++state.handshakeFrames > this.#limits.maxHandshakeFrames) {
      return this.#resetStream(harness, 'handshake_limit', CLOSE.POLICY);
    }
    if (header.kind === 'reset') stream.resetSent = true;
    stream.lastActivity = at;
    this.#forwardToEnvironment(harness, stream.env, parts, length);
  }

  #forwardToEnvironment(harness: HarnessPeer, env: EnvironmentPeer, parts: Buffer[], length: number) {
    const ws = env.peer.ws;
    if (!env.peer.open) return; // the environment is going: its close event resets this stream
    if (this.#tap) this.#tap('to_environment', joinParts(parts, length));
    this.#fastPath.sendParts(ws, parts, length);
    this.#framesTo.to_environment.inc();
    this.#bytesTo.to_environment.inc(length);
    if (ws.bufferedAmount > this.#limits.environmentHighWaterBytes && !harness.peer.paused) {
      env.peer.throttle(harness.peer);
      this.#pauses.inc();
    }
  }

  /** The first frame must be `Resume`; it claims the stream id on the harness's environment. */
  #claim(harness: HarnessPeer, parts: Buffer[], length: number) {
    let frame: Frame;
    try {
      frame = decodeFrame(joinParts(parts, length), { maxBytes: this.#limits.maxMessageBytes });
    } catch {
      this.#drops.malformed_frame.inc();
      return this.#closeHarness(harness, CLOSE.PROTOCOL, 'invalid first frame');
    }
    if (frame.kind !== 'resume') {
      this.#drops.malformed_frame.inc();
      return this.#closeHarness(harness, CLOSE.PROTOCOL, 'the first frame must be Resume');
    }
    const id = frame.streamId;
    const env = this.#environments.get(harness.environmentId);
    const key = streamKey(id);
    if (!env) return this.#refuseStream(harness, id, 'environment_offline', CLOSE.TRY_AGAIN);
    if (env.registrationId !== harness.registrationId) {
      return this.#refuseStream(harness, id, 'registration_mismatch', CLOSE.REGISTRATION_MISMATCH);
    }
    if (env.streams.has(key)) return this.#refuseStream(harness, id, 'duplicate_stream', CLOSE.DUPLICATE_STREAM);
    if (env.streams.size >= this.#limits.maxStreamsPerEnvironment) {
      return this.#refuseStream(harness, id, 'stream_limit', CLOSE.STREAM_LIMIT);
    }
    env.streams.set(key, harness);
    harness.hold.settle();
    harness.state = {
      kind: 'claimed',
      stream: { id, key, env, lastActivity: harness.peer.lastSeen, resetSent: false },
      handshakeFrames: 1,
      // An environment that never answers must not hold the stream (and its buffers) until the idle timeout.
      deadline: setTimeout(() => this.#onHandshakeTimeout(harness), this.#limits.handshakeTimeoutMs),
    };
    this.#forwardToEnvironment(harness, env, parts, length);
  }

  #onHandshakeTimeout(harness: HarnessPeer) {
    if (harness.state.kind === 'claimed') this.#resetStream(harness, 'handshake_timeout', CLOSE.TIMEOUT);
  }

  /** A claim the relay will not route: Reset to this harness only (the environment never saw it). */
  #refuseStream(harness: HarnessPeer, streamId: string, reason: ResetReason, code: number) {
    this.#resets[reason].inc();
    sendReset(harness.peer.ws, streamId, reason);
    this.#closeHarness(harness, code, reason);
  }

  #onHarnessClose(harness: HarnessPeer) {
    harness.peer.forget();
    this.#harnesses.delete(harness);
    const { state } = harness;
    if ((state.kind === 'claimed' || state.kind === 'answered') && !state.stream.resetSent) {
      this.#resets.harness_closed.inc();
      sendReset(state.stream.env.peer.ws, state.stream.id, 'harness_closed');
    }
    this.#leaveStream(harness);
  }

  /** Relay-initiated end of a live stream: Reset to both sides, then close the harness socket. */
  #resetStream(harness: HarnessPeer, reason: ResetReason, code: number) {
    const { state } = harness;
    if (state.kind === 'closing') return;
    this.#resets[reason].inc();
    if (state.kind !== 'unclaimed') {
      if (!state.stream.resetSent) sendReset(state.stream.env.peer.ws, state.stream.id, reason);
      sendReset(harness.peer.ws, state.stream.id, reason);
    }
    this.#closeHarness(harness, code, reason);
  }

  #closeHarness(harness: HarnessPeer, code: number, reason: string) {
    if (harness.state.kind === 'closing') return;
    harness.hold.settle();
    this.#leaveStream(harness);
    harness.state = CLOSING;
    harness.peer.close(code, reason, this.#limits.closeGraceMs);
  }

  /** Out of its environment's table (its deadline cleared, read again if it was paused): the stream is over. */
  #leaveStream(harness: HarnessPeer) {
    const { state } = harness;
    if (state.kind !== 'claimed' && state.kind !== 'answered') return;
    if (state.kind === 'claimed') clearTimeout(state.deadline);
    const { env, key } = state.stream;
    if (env.streams.get(key) === harness) env.streams.delete(key);
    // Read again: a closing socket must be able to receive the peer's close frame (its data is ignored).
    env.peer.release(harness.peer);
    harness.state = CLOSING;
  }

  // Revocation --------------------------------------------------------------------------------------------------

  /**
   * Ends every socket of each newly revoked registration (its environment socket, so every stream of it, and every
   * harness socket whose grant names it) and refuses its URLs from now on. Already known revocations are skipped:
   * the heartbeat repeats every revocation of the last URL lifetime.
   */
  revoke(revocations: Revocation[], source: RevocationSource): void {
    const at = this.#clock();
    const fresh = new Set<string>();
    for (const { environmentId, registrationId } of revocations) {
      const key = revocationKey(environmentId, registrationId);
      if (fresh.has(key) || this.#revoked.get(key, at) !== undefined) continue;
      const forgotten = this.#revoked.set(key, true, at);
      if (forgotten > 0) this.#metrics.counter('relay_forgotten_total', { table: 'revocations' }).inc(forgotten);
      fresh.add(key);
    }
    if (fresh.size === 0) return;
    this.#metrics.counter('relay_revocations_total', { source }).inc(fresh.size);
    this.#log.info({ source, registrations: fresh.size }, 'registrations revoked');
    const revokedSockets = (role: 'environment' | 'harness') =>
      this.#metrics.counter('relay_revoked_sockets_total', { role }).inc();
    for (const env of [...this.#environments.values()]) {
      if (!fresh.has(revocationKey(env.environmentId, env.registrationId))) continue;
      this.#environments.delete(env.environmentId);
      revokedSockets('environment');
      this.#log.info({ environmentId: env.environmentId }, 'environment socket closed: registration revoked');
      for (let n = env.streams.size; n > 0; n--) revokedSockets('harness');
      this.#endEnvironment(env, 'registration_revoked', CLOSE.REGISTRATION_REVOKED);
      env.peer.ws.close(CLOSE.REGISTRATION_REVOKED, 'registration_revoked');
      this.#options.onEnvironmentsChanged();
    }
    for (const harness of [...this.#harnesses]) {
      if (harness.state.kind === 'closing') continue;
      if (!fresh.has(revocationKey(harness.environmentId, harness.registrationId))) continue;
      revokedSockets('harness');
      this.#resetStream(harness, 'registration_revoked', CLOSE.REGISTRATION_REVOKED);
    }
  }

  // Timers: ping/pong and idle streams --------------------------------------------------------------------------

  #keepAlive() {
    const at = this.#clock();
    const { pongTimeoutMs } = this.#limits;
    for (const env of this.#environments.values()) {
      if (env.peer.expired(at, pongTimeoutMs)) this.#drops.pong_timeout.inc();
    }
    for (const harness of this.#harnesses) {
      if (harness.state.kind !== 'closing' && harness.peer.expired(at, pongTimeoutMs)) this.#drops.pong_timeout.inc();
    }
  }

  #sweep() {
    const at = this.#clock();
    for (const harness of this.#harnesses) {
      const { state } = harness;
      if (state.kind === 'unclaimed') {
        if (at - state.since >= this.#limits.claimTimeoutMs) {
          this.#drops.claim_timeout.inc();
          this.#closeHarness(harness, CLOSE.TIMEOUT, 'no Resume frame in time');
        }
      } else if (state.kind !== 'closing' && at - state.stream.lastActivity >= this.#limits.idleTimeoutMs) {
        this.#resetStream(harness, 'idle_timeout', CLOSE.TIMEOUT);
      }
    }
  }

  // Introspection and shutdown ----------------------------------------------------------------------------------

  stats(): RelayStats {
    let streams = 0;
    let environmentQueue = 0;
    let harnessQueue = 0;
    let paused = 0;
    for (const env of this.#environments.values()) {
      streams += env.streams.size;
      environmentQueue += env.peer.ws.bufferedAmount;
      paused += env.peer.throttled;
    }
    for (const harness of this.#harnesses) harnessQueue += harness.peer.ws.bufferedAmount;
    return {
      environments: this.#environments.size,
      harnessSockets: this.#harnesses.size,
      streams,
      queuedBytes: { environment: environmentQueue, harness: harnessQueue },
      pausedHarnessSockets: paused,
    };
  }

  /** Stops the timers, closes every socket with 1001 and waits for them (cut after the close grace). */
  async close(): Promise<void> {
    clearInterval(this.#pingTimer);
    clearInterval(this.#sweepTimer);
    for (const env of this.#environments.values()) env.peer.resumeThrottled();
    const peers = [...[...this.#environments.values()].map((e) => e.peer), ...[...this.#harnesses].map((h) => h.peer)];
    const gone = peers.map((peer) => peer.closed());
    for (const { ws } of peers) if (ws.readyState === OPEN) ws.close(CLOSE.GOING_AWAY, 'relay shutting down');
    const grace = setTimeout(() => {
      for (const { ws } of peers) ws.terminate();
    }, this.#limits.closeGraceMs);
    await Promise.all(gone);
    clearTimeout(grace);
    for (const harness of this.#harnesses) {
      harness.peer.forget();
      if (harness.state.kind === 'claimed') clearTimeout(harness.state.deadline);
    }
  }
}

function sendReset(ws: WebSocket, streamId: string, reason: ResetReason) {
  if (ws.readyState !== OPEN) return;
  ws.send(encodeFrame(resetFrame(streamId, reason)), BINARY);
}
