import { MAX_FRAME_BYTES } from '@tether/relay-frames';

/** Every bound the relay enforces, with its behaviour at the limit (apps/relay/README.md, "Backpressure and limits"). All are flags. */
export interface RelayLimits {
  /** Largest WebSocket message; larger → close 1009. Default 256 KiB, the endpoints' own limit. */
  maxMessageBytes: number;
  /** Concurrent streams (harness sockets) per environment; beyond → Reset `stream_limit` + close 4029. */
  maxStreamsPerEnvironment: number;
  /** Open sockets (both roles) per source IP; beyond → HTTP 429 at the upgrade. */
  maxConnectionsPerIp: number;
  /** Open WebSocket sockets in all (both roles, every source); beyond → HTTP 503 at the upgrade (`connection_limit`). */
  maxConnections: number;
  /**
   * Open sockets per harness grant (one signed harness URL: each `/connect` bundle is its own, by its nonce); beyond →
   * HTTP 429 at the upgrade (`url_limit`). A client uses one socket per bundle; the spare ones cover a retry while an
   * earlier socket of the same URL is still closing.
   */
  maxSocketsPerUrl: number;
  /** Of those, sockets that have not claimed a stream yet (no `Resume`); beyond → HTTP 429 (`url_unclaimed_limit`). */
  maxUnclaimedPerUrl: number;
  /** Frames a harness may send before the environment answers its stream; beyond → Reset `handshake_limit`. */
  maxHandshakeFrames: number;
  /**
   * The environment must answer a claimed stream (its first frame back: the Noise message 2 or a Reset) within this;
   * else the stream is reset (`handshake_timeout`) both ways and the harness socket closed 4008.
   */
  handshakeTimeoutMs: number;
  /** A stream with no frame either way for this long is reset (`idle_timeout`) and its socket closed 4008. */
  idleTimeoutMs: number;
  /** A harness socket that has not claimed a stream (`Resume`) within this is closed 4008 (`claim_timeout`). */
  claimTimeoutMs: number;
  /** WebSocket ping interval, both roles. */
  pingIntervalMs: number;
  /** A socket silent (no pong, no message) for this long is dropped (`pong_timeout`). */
  pongTimeoutMs: number;
  /** Pause reading a stream's harness socket while its environment socket has more than this buffered. */
  environmentHighWaterBytes: number;
  /** A harness socket with more than this buffered towards it is reset (`relay_backpressure`) and closed. */
  harnessMaxBufferedBytes: number;
  /** After a Reset, how long a closing harness socket may take to finish the close handshake. */
  closeGraceMs: number;
  /**
   * The registry's relay URL lifetime (its `relayUrlTtlMs`). A revoked registration is refused this long after the
   * relay learns of it, and an environment's highest registration epoch is remembered this long after it was last
   * seen: by then every URL that could name either has expired.
   */
  urlLifetimeMs: number;
  /** Revoked registrations, and environments' epochs, each remembered at most this many; the oldest go first. */
  maxRememberedRegistrations: number;
}

export const DEFAULT_LIMITS: Readonly<RelayLimits> = Object.freeze({
  maxMessageBytes: MAX_FRAME_BYTES,
  maxStreamsPerEnvironment: 128,
  maxConnectionsPerIp: 1024,
  maxConnections: 20_000,
  maxSocketsPerUrl: 4,
  maxUnclaimedPerUrl: 2,
  maxHandshakeFrames: 8,
  handshakeTimeoutMs: 10_000,
  idleTimeoutMs: 30 * 60_000,
  claimTimeoutMs: 3_000,
  pingIntervalMs: 30_000,
  pongTimeoutMs: 60_000,
  environmentHighWaterBytes: 1024 * 1024,
  harnessMaxBufferedBytes: 4 * 1024 * 1024,
  closeGraceMs: 5_000,
  urlLifetimeMs: 24 * 3600_000,
  maxRememberedRegistrations: 100_000,
});

/** WebSocket close codes the relay uses; each outcome has its own. */
export const CLOSE = Object.freeze({
  /** Shutdown, or the environment socket went away: reconnect. */
  GOING_AWAY: 1001,
  /** Protocol error (bad first frame, a frame for another stream, malformed frame). */
  PROTOCOL: 1002,
  /** A text message. */
  TEXT: 1003,
  /** Policy (handshake-stage frame limit). */
  POLICY: 1008,
  /** A message over `maxMessageBytes`. */
  TOO_BIG: 1009,
  /** The environment is not connected here: try again later. */
  TRY_AGAIN: 1013,
  /** The stream ended normally (the environment reset it). */
  STREAM_RESET: 4000,
  /** This environment socket was replaced by one of a newer registration (a higher epoch): final for its executor. */
  REPLACED: 4001,
  /** The harness could not take the environment's output fast enough. */
  BACKPRESSURE: 4002,
  /** The stream id is already claimed by a live harness socket. */
  DUPLICATE_STREAM: 4003,
  /** The harness's grant is for another executor registration than the connected one. */
  REGISTRATION_MISMATCH: 4004,
  /** Idle, claim or handshake timeout. */
  TIMEOUT: 4008,
  /** An environment socket whose registration epoch is older than one this relay has seen for the environment. */
  STALE_REGISTRATION: 4009,
  /** The socket's executor registration was revoked by the registry. */
  REGISTRATION_REVOKED: 4010,
  /**
   * This environment socket was replaced by another of the same registration (its executor reconnecting, or
   * someone replaying its URL): the executor reconnects, and so takes its place back.
   */
  REPLACED_SAME_REGISTRATION: 4011,
  /** Too many streams on this environment. */
  STREAM_LIMIT: 4029,
});
