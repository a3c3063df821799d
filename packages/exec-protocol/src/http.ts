/** `http/request` (spec §3.10): executor-side HTTP, as the Codex 0.171.0 binary shapes it. */
import { type Static, Type } from '@sinclair/typebox';
import { Literals, Nullable, U64 } from './schema-parts.js';

/** One header line; a list of them keeps order and repeats. */
export const HttpHeader = Type.Object({ name: Type.String(), value: Type.String() });
export type HttpHeader = Static<typeof HttpHeader>;

/**
 * A request header line. With `valueEnvVar` (Codex's, capability `httpHeaderEnvVars`) the executor appends the
 * value of that variable of its own environment to `value` (`value: "Bearer "` for a bearer token), so a
 * secret the executor holds never crosses the connection; `value` is still required.
 */
export const HttpRequestHeader = Type.Object({
  name: Type.String(),
  value: Type.String(),
  valueEnvVar: Type.Optional(Nullable(Type.String())),
});
export type HttpRequestHeader = Static<typeof HttpRequestHeader>;

export const HttpRedirectPolicy = Literals('follow', 'stop');
export type HttpRedirectPolicy = Static<typeof HttpRedirectPolicy>;

export const HttpRequestParams = Type.Object({
  method: Type.String(),
  url: Type.String(),
  headers: Type.Optional(Nullable(Type.Array(HttpRequestHeader))),
  bodyBase64: Type.Optional(Nullable(Type.String())),
  /** Whole-request deadline, body included; absent or null = none. */
  timeoutMs: Type.Optional(Nullable(U64)),
  requestId: Type.String(),
  streamResponse: Type.Optional(Nullable(Type.Boolean())),
  redirectPolicy: Type.Optional(Nullable(HttpRedirectPolicy)),
});
export type HttpRequestParams = Static<typeof HttpRequestParams>;

export const HttpRequestResult = Type.Object({
  status: Type.Integer({ minimum: 0, maximum: 65535 }),
  headers: Type.Array(HttpHeader),
  /** The whole body, or "" when the body is streamed as `http/request/bodyDelta` notifications. */
  bodyBase64: Type.String(),
});
export type HttpRequestResult = Static<typeof HttpRequestResult>;

export const HttpBodyDeltaNotification = Type.Object({
  requestId: Type.String(),
  /** 1-based, one per notification, the last one (`done: true`) included. */
  seq: U64,
  deltaBase64: Type.String(),
  done: Type.Boolean(),
  error: Nullable(Type.String()),
});
export type HttpBodyDeltaNotification = Static<typeof HttpBodyDeltaNotification>;
