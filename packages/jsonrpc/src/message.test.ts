import { describe, expect, it } from 'vitest';
import { classifyMessage, parseMessage, serializeError, serializeNotification, serializeResponse } from './message.js';

describe('classifyMessage', () => {
  it('classifies requests with integer and string ids', () => {
    expect(classifyMessage({ id: 1, method: 'm', params: { a: 1 } })).toEqual({
      kind: 'request',
      id: 1,
      method: 'm',
      params: { a: 1 },
    });
    expect(classifyMessage({ id: 'abc', method: 'm' })).toEqual({
      kind: 'request',
      id: 'abc',
      method: 'm',
      params: null,
    });
  });

  it('treats a method without a usable id as a notification and ignores `jsonrpc`', () => {
    expect(classifyMessage({ jsonrpc: '2.0', method: 'initialized', params: {} })).toMatchObject({
      kind: 'notification',
      method: 'initialized',
    });
    expect(classifyMessage({ id: -4, method: 'x' })).toMatchObject({ kind: 'request', id: -4 });
  });

  it('classifies responses and errors', () => {
    expect(classifyMessage({ id: 3, result: null })).toEqual({ kind: 'response', id: 3, result: null });
    expect(classifyMessage({ id: 3, error: { code: -1, message: 'x' } })).toMatchObject({ kind: 'error', id: 3 });
  });

  it('rejects an id that is neither a string nor an integer, as Codex does', () => {
    for (const id of [null, true, 1.5, {}]) {
      expect(classifyMessage({ id, method: 'initialized' })).toEqual({
        kind: 'malformed',
        reason: 'data did not match any variant of untagged enum RequestId',
      });
    }
    expect(classifyMessage({ id: 10 })).toEqual({ kind: 'malformed', reason: 'missing field `error`' });
    expect(classifyMessage([])).toEqual({ kind: 'malformed', reason: 'expected a JSON-RPC object' });
  });

  it('reports anything else as malformed', () => {
    for (const value of [null, 1, 'x', [], {}, { id: 1 }, { id: 1, error: { code: 'x', message: 1 } }]) {
      expect(classifyMessage(value).kind).toBe('malformed');
    }
  });
});

describe('parseMessage', () => {
  it('parses text and UTF-8 bytes', () => {
    expect(parseMessage('{"id":1,"method":"m"}').kind).toBe('request');
    expect(parseMessage(Buffer.from('{"method":"m"}')).kind).toBe('notification');
  });

  it('turns invalid JSON into a malformed message with the reason', () => {
    const message = parseMessage('not-json');
    expect(message.kind).toBe('malformed');
    expect(message.kind === 'malformed' && message.reason.length).toBeGreaterThan(0);
  });
});

describe('serialize', () => {
  it('omits the jsonrpc member and absent fields', () => {
    expect(serializeResponse(1, { ok: true })).toBe('{"id":1,"result":{"ok":true}}');
    expect(serializeResponse('a', undefined)).toBe('{"id":"a","result":null}');
    expect(serializeNotification('n', undefined)).toBe('{"method":"n"}');
    expect(serializeError(-1, { code: -32600, message: 'bad' })).toBe(
      '{"id":-1,"error":{"code":-32600,"message":"bad"}}',
    );
  });
});
