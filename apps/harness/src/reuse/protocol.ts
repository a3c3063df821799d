/**
 * The local protocol between a harness invocation and its connection master, on the master's unix socket.
 * Frames are a u32 big-endian length and that many bytes (as `SocketMessageTransport` sends them). The
 * client's first frame is a control request (JSON); the master answers with one control reply (JSON).
 * After a successful `channel` reply the socket carries the channel's JSON-RPC messages, spliced unchanged
 * to and from a secure stream the master set up; after any other reply the master closes the socket.
 */
import type { Socket } from 'node:net';
import type { NoisePublicKeyJson } from '@tether/client';

export const PROTOCOL = 'tether-master/1';
/** A control frame is small; a longer one is a broken or hostile peer. */
export const MAX_CONTROL_BYTES = 64 * 1024;

export type ControlRequest = { protocol: typeof PROTOCOL; op: 'channel' | 'status' | 'stop' };

export interface MasterStatus {
  pid: number;
  environmentId: string;
  /** The registry's origin (never a path or query, which could hold a credential). */
  registry: string;
  /** Channels set up and waiting. */
  ready: number;
  /** Channels handed to invocations and still open. */
  inUse: number;
  /** Idle timeout in seconds (0: none). */
  persistSeconds: number;
  startedAt: string;
  /** The warm process waiting for a command (src/warm.ts), null when none (absent from older masters). */
  warmPid?: number | null;
  /** Whether that warm process has its command's channel set up (src/reuse/ready-channel.ts). */
  warmChannel?: boolean;
}

export type ControlReply =
  | { ok: true; op: 'channel'; executorPublicKey: NoisePublicKeyJson }
  | { ok: true; op: 'status'; status: MasterStatus }
  | { ok: true; op: 'stop' }
  | { ok: false; error: string };

export function encodeFrame(value: unknown): Buffer {
  const json = Buffer.from(JSON.stringify(value), 'utf8');
  const out = Buffer.allocUnsafe(4 + json.length);
  out.writeUInt32BE(json.length, 0);
  json.copy(out, 4);
  return out;
}

/**
 * Reads one control frame from `socket`: its JSON value, and the bytes received after it (which belong to
 * whatever the socket carries next). Rejects on a frame over MAX_CONTROL_BYTES, bad JSON, the socket
 * closing, or `timeoutMs`.
 */
export function readControlFrame(socket: Socket, timeoutMs: number): Promise<{ value: unknown; rest: Buffer }> {
  return new Promise((resolve, reject) => {
    let received: Buffer = Buffer.alloc(0);
    const done = (err: Error | null, result?: { value: unknown; rest: Buffer }) => {
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('close', onClose);
      socket.off('error', onError);
      if (err) reject(err);
      else resolve(result!);
    };
    const onData = (chunk: Buffer) => {
      received = received.length === 0 ? chunk : Buffer.concat([received, chunk]);
      if (received.length < 4) return;
      const length = received.readUInt32BE(0);
      if (length > MAX_CONTROL_BYTES) return done(new Error(`control frame of ${length} bytes is too long`));
      if (received.length < 4 + length) return;
      let value: unknown;
      try {
        value = JSON.parse(received.subarray(4, 4 + length).toString('utf8'));
      } catch {
        return done(new Error('control frame is not JSON'));
      }
      socket.pause();
      done(null, { value, rest: received.subarray(4 + length) });
    };
    const onClose = () => done(new Error('the socket closed before answering'));
    const onError = (err: Error) => done(err);
    const timer = setTimeout(() => done(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    socket.on('data', onData);
    socket.once('close', onClose);
    socket.once('error', onError);
    socket.resume();
  });
}

export function parseRequest(value: unknown): ControlRequest | null {
  if (typeof value !== 'object' || value === null) return null;
  const { protocol, op } = value as Record<string, unknown>;
  if (protocol !== PROTOCOL) return null;
  if (op !== 'channel' && op !== 'status' && op !== 'stop') return null;
  return { protocol, op };
}

/** Validates a master's reply (the master is the user's own, but a bug there must not become ours). */
export function parseReply(value: unknown, op: ControlRequest['op']): ControlReply {
  if (typeof value !== 'object' || value === null) throw new Error('master reply is not an object');
  const reply = value as Record<string, unknown>;
  if (reply.ok === false) {
    const error = typeof reply.error === 'string' ? reply.error.slice(0, 500) : 'unknown error';
    return { ok: false, error };
  }
  if (reply.ok !== true || reply.op !== op) throw new Error('master reply does not answer the request');
  if (op === 'channel') {
    if (typeof reply.executorPublicKey !== 'object' || reply.executorPublicKey === null) {
      throw new Error('master reply names no executor key');
    }
    return { ok: true, op, executorPublicKey: reply.executorPublicKey as NoisePublicKeyJson };
  }
  if (op === 'status') {
    const s = reply.status as Record<string, unknown> | undefined;
    if (!s || typeof s.pid !== 'number' || typeof s.environmentId !== 'string') throw new Error('bad status reply');
    return { ok: true, op, status: s as unknown as MasterStatus };
  }
  return { ok: true, op: 'stop' };
}
