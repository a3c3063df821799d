/**
 * JSON-RPC messages in the Codex dialect (spec/exec-protocol.md §1.5): the `jsonrpc` member is omitted
 * on output and ignored on input; ids are integers or strings and are echoed unchanged. Classification
 * is "untagged": the first shape that matches wins.
 */
export type RequestId = number | string;

export interface RpcErrorObject {
  code: number;
  message: string;
  data?: unknown;
}

export type InboundMessage =
  | { kind: 'request'; id: RequestId; method: string; params: unknown }
  | { kind: 'notification'; method: string; params: unknown }
  | { kind: 'response'; id: RequestId; result: unknown }
  | { kind: 'error'; id: RequestId; error: RpcErrorObject }
  | { kind: 'malformed'; reason: string };

/** The id used for errors about a message that could not be read (Codex uses -1). */
export const MALFORMED_MESSAGE_ID = -1;

function isRequestId(value: unknown): value is RequestId {
  return typeof value === 'string' || (typeof value === 'number' && Number.isSafeInteger(value));
}

function isErrorObject(value: unknown): value is RpcErrorObject {
  if (typeof value !== 'object' || value === null) return false;
  const candidate = value as Record<string, unknown>;
  return Number.isInteger(candidate.code) && typeof candidate.message === 'string';
}

/** Classifies an already-parsed JSON value. */
export function classifyMessage(value: unknown): InboundMessage {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return { kind: 'malformed', reason: 'expected a JSON-RPC object' };
  }
  const message = value as Record<string, unknown>;
  // An `id` that is present must be a string or an integer, even on a notification (Codex: parse error).
  if ('id' in message && !isRequestId(message.id)) {
    return { kind: 'malformed', reason: 'data did not match any variant of untagged enum RequestId' };
  }
  const hasId = 'id' in message;
  if (typeof message.method === 'string') {
    const params = message.params ?? null;
    if (hasId) return { kind: 'request', id: message.id as RequestId, method: message.method, params };
    return { kind: 'notification', method: message.method, params };
  }
  if (!hasId) return { kind: 'malformed', reason: 'missing field `method`' };
  if ('result' in message) return { kind: 'response', id: message.id as RequestId, result: message.result };
  if (!('error' in message)) return { kind: 'malformed', reason: 'missing field `error`' };
  if (isErrorObject(message.error)) return { kind: 'error', id: message.id as RequestId, error: message.error };
  return { kind: 'malformed', reason: 'invalid error object: expected `code` and `message`' };
}

/** Parses one transport message (text, or UTF-8 bytes from a binary frame). Never throws. */
export function parseMessage(data: string | Buffer): InboundMessage {
  let value: unknown;
  try {
    value = JSON.parse(typeof data === 'string' ? data : data.toString('utf8'));
  } catch (err) {
    return { kind: 'malformed', reason: (err as Error).message };
  }
  return classifyMessage(value);
}

export function serializeRequest(id: RequestId, method: string, params: unknown): string {
  return params === undefined ? JSON.stringify({ id, method }) : JSON.stringify({ id, method, params });
}

export function serializeNotification(method: string, params: unknown): string {
  return params === undefined ? JSON.stringify({ method }) : JSON.stringify({ method, params });
}

export function serializeResponse(id: RequestId, result: unknown): string {
  return JSON.stringify({ id, result: result ?? null });
}

export function serializeError(id: RequestId, error: RpcErrorObject): string {
  const body: RpcErrorObject = { code: error.code, message: error.message };
  if (error.data !== undefined) body.data = error.data;
  return JSON.stringify({ id, error: body });
}
