/** `http/request` (spec §3.10): executor-side HTTP, as the Codex 0.171.0 binary shapes it. */
import { type Static, Type } from '@sinclair/typebox';
import { Literals, Nullable, U64 } from './schema-parts.js';

/** One header line; a list of them keeps order and repeats. */
export const HttpHeader = Type.Object({ name: Type.String(), value: Type.String() });
export type HttpHeader = Static<typeof HttpHeader>;

export const HttpRedirectPolicy = Literals('follow', 'stop');
export type HttpRedirectPolicy = Static<typeof HttpRedirectPolicy>;

export const HttpRequestParams = Type.Object({
  method: Type.String(),
  url: Type.String(),
  headers: Type.Optional(Nullable(Type.Array(HttpHeader))),
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
