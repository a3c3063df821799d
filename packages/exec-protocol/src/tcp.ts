/**
 * TCP forwarding (Tether extension, capability `tcpForward`): the executor opens a TCP connection for the
 * client (`harness forward`, ssh -L) and carries its bytes both ways inside the session, each direction
 * flow-controlled with the credit machinery of flow-control.ts, as an SSH channel is.
 *
 * On the wire:
 * - request `tcp/connect {streamId, host, port, windowBytes}` → `{windowBytes, address, port}`, answered
 *   once the executor's connect succeeded, or an error whose `data.kind` is a `TcpConnectErrorKind`. The
 *   client names the stream (as it names processes), so bytes that arrive before the answer have a home.
 *   The granted window (the request's, clamped) holds for both directions.
 * - notification `tcp/data {streamId}` both ways: the bytes are the message's binary attachment where the
 *   transport carries attachments, else `dataBase64`. A sender has at most the window (plus one chunk)
 *   unacknowledged; one chunk is at most `MAX_TCP_CHUNK_BYTES`.
 * - notification `tcp/ack {streamId, bytes, received?}` both ways: the receiver has consumed `bytes` in all
 *   (cumulative, so a repeated or overtaken ack is harmless). From the client it may carry `received` (as
 *   `tcp/received` below), which then need not be sent on its own: one message per window quarter.
 * - notification `tcp/received {bytes}` client → executor: `bytes` of `tcp/data` have arrived on this
 *   connection in all, every stream together (cumulative; sent each `TCP_RECEIVED_REPORT_BYTES`). The executor
 *   keeps what is on the way (sent, not yet received) within a budget: the relay resets a harness with more
 *   than 4 MiB queued towards it. Per-stream windows bound what a consumer has not taken; this bounds the
 *   pipe, so one stalled consumer never holds up the other streams.
 * - notification `tcp/shutdown {streamId}` both ways: this direction has ended (half-close); the other
 *   direction goes on.
 * - notification `tcp/close {streamId}` client → executor: reset, the stream is forgotten at once.
 * - notification `tcp/closed {streamId, error}` executor → client: the stream is gone (both directions
 *   ended, or `error` says why); the executor forgets it.
 * Streams belong to the connection: they end with it (a resumed session starts with none).
 */
import { type Static, Type } from '@sinclair/typebox';
import { Literals, Nullable, U64 } from './schema-parts.js';

/** The window our SDK asks for per forwarded connection (each direction). */
export const DEFAULT_TCP_WINDOW_BYTES = 4 * 1024 * 1024;
/** Smallest and largest window an executor grants per forwarded connection; a request outside is clamped. */
export const MIN_TCP_WINDOW_BYTES = 64 * 1024;
export const MAX_TCP_WINDOW_BYTES = 8 * 1024 * 1024;
/** Largest payload of one `tcp/data`; a bigger one is a protocol violation that resets the stream. */
export const MAX_TCP_CHUNK_BYTES = 256 * 1024;
/**
 * The client reports (`tcp/received`) each time this many more `tcp/data` bytes have arrived on the connection,
 * all streams together; an executor's budget of bytes on the way is never below it.
 */
export const TCP_RECEIVED_REPORT_BYTES = 1024 * 1024;
/** Longest stream id and host name accepted. */
export const MAX_TCP_STREAM_ID_LENGTH = 128;
export const MAX_TCP_HOST_LENGTH = 255;

export function clampTcpWindow(requested: number): number {
  return Math.min(MAX_TCP_WINDOW_BYTES, Math.max(MIN_TCP_WINDOW_BYTES, Math.floor(requested)));
}

const StreamId = Type.String({ minLength: 1, maxLength: MAX_TCP_STREAM_ID_LENGTH });

export const TcpConnectParams = Type.Object({
  streamId: StreamId,
  host: Type.String({ minLength: 1, maxLength: MAX_TCP_HOST_LENGTH }),
  port: Type.Integer({ minimum: 1, maximum: 65535 }),
  windowBytes: U64,
});
export type TcpConnectParams = Static<typeof TcpConnectParams>;

export const TcpConnectResult = Type.Object({
  windowBytes: U64,
  /** The address the executor connected to (after resolving `host`). */
  address: Type.String({ maxLength: 64 }),
  port: Type.Integer({ minimum: 1, maximum: 65535 }),
});
export type TcpConnectResult = Static<typeof TcpConnectResult>;

/** `data.kind` of a failed `tcp/connect`. */
export const TcpConnectErrorKind = Literals(
  'notAllowed',
  'refused',
  'unresolvable',
  'unreachable',
  'timeout',
  'tooManyStreams',
  'duplicateStream',
  'disabled',
  'failed',
);
export type TcpConnectErrorKind = Static<typeof TcpConnectErrorKind>;

/** `tcp/data` (bytes as the attachment, or `dataBase64` where the transport carries none). */
export const TcpDataParams = Type.Object({ streamId: StreamId, dataBase64: Type.Optional(Type.String()) });
export type TcpDataParams = Static<typeof TcpDataParams>;

export const TcpAckParams = Type.Object({ streamId: StreamId, bytes: U64, received: Type.Optional(U64) });
export type TcpAckParams = Static<typeof TcpAckParams>;

export const TcpReceivedParams = Type.Object({ bytes: U64 });
export type TcpReceivedParams = Static<typeof TcpReceivedParams>;

/** `tcp/shutdown` and `tcp/close`. */
export const TcpStreamParams = Type.Object({ streamId: StreamId });
export type TcpStreamParams = Static<typeof TcpStreamParams>;

export const TcpClosedParams = Type.Object({
  streamId: StreamId,
  error: Nullable(Type.String({ maxLength: 1024 })),
});
export type TcpClosedParams = Static<typeof TcpClosedParams>;
