import { describe, expect, it, vi } from 'vitest';
import { attachmentOf, encodeWithAttachment, releaseAttachment } from './attachment.js';
import {
  classifyMessage,
  type InboundMessage,
  isPlainStringText,
  parseLargeMessage,
  parseMessage,
  serializeError,
  serializeNotification,
  serializeResponse,
} from './message.js';

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

  it('a pooled message: text goes back once parsed; an attachment carries the release to its last user', () => {
    const text = vi.fn();
    expect(parseMessage(Buffer.from('{"method":"m","params":{"a":1}}'), text).kind).toBe('notification');
    expect(text).toHaveBeenCalledTimes(1);
    const bad = vi.fn();
    expect(parseMessage(Buffer.from('{'), bad).kind).toBe('malformed');
    expect(bad).toHaveBeenCalledTimes(1);

    const held = vi.fn();
    const message = parseMessage(encodeWithAttachment('{"method":"m","params":{}}', Buffer.alloc(4, 7)), held);
    const params = message.kind === 'notification' ? message.params : null;
    expect([...(attachmentOf(params) ?? [])]).toEqual([7, 7, 7, 7]);
    expect(held).not.toHaveBeenCalled();
    releaseAttachment(params);
    releaseAttachment(params);
    expect(held).toHaveBeenCalledTimes(1);
    expect(JSON.stringify(params)).toBe('{}');

    const refused = vi.fn();
    expect(parseMessage(encodeWithAttachment('{"method":"m","params":[]}', Buffer.alloc(4)), refused).kind).toBe(
      'malformed',
    );
    expect(refused).toHaveBeenCalledTimes(1);
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

describe('isPlainStringText', () => {
  const plain = (bytes: Uint8Array) => bytes.every((b) => b >= 0x20 && b < 0x80 && b !== 0x5c);

  it('accepts exactly printable ASCII without backslash, at every alignment and length', () => {
    let seed = 5;
    const next = (n: number) => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return (seed >>> 8) % n; // the generator's low bits repeat with short periods
    };
    const memory = Buffer.alloc(256);
    let rejected = 0;
    for (let i = 0; i < 20_000; i++) {
      const offset = next(8);
      const length = next(40);
      for (let k = 0; k < length; k++) memory[offset + k] = 0x20 + next(0x60);
      // Usually one byte from the classes that must be refused: control, backslash, beyond ASCII.
      if (length > 0 && next(4) !== 0) {
        const bad = [next(0x20), 0x5c, 0x80 + next(0x80), 0x00, 0x1f][next(5)] as number;
        memory[offset + next(length)] = bad;
      }
      const view = memory.subarray(offset, offset + length);
      const expected = plain(view);
      if (!expected) rejected++;
      expect(isPlainStringText(view), view.toString('hex')).toBe(expected);
    }
    expect(rejected).toBeGreaterThan(5_000);
  });
});

describe('large messages (parseLargeMessage)', () => {
  const base64 = (bytes: number, fill = 7) => Buffer.alloc(bytes, fill).toString('base64');
  const big = base64(96 * 1024);

  /** parseMessage must answer exactly what JSON.parse + classify answers, whichever path it takes. */
  function expectSameAsJsonParse(text: string) {
    const bytes = Buffer.from(text, 'utf8');
    let expected: InboundMessage;
    try {
      expected = classifyMessage(JSON.parse(text));
    } catch (err) {
      expected = { kind: 'malformed', reason: (err as Error).message };
    }
    expect(parseMessage(bytes)).toEqual(expected);
  }

  it('takes the long base64 value straight from the bytes in requests, responses and notifications', () => {
    const shapes = [
      { id: 7, method: 'fs/writeBlock', params: { handleId: 'w', offset: 0, chunk: big } },
      { id: 'r', result: { chunk: big, eof: false } },
      { method: 'process/output', params: { processId: 'p', seq: 3, stream: 'stdout', chunk: big } },
      { id: 1, result: { chunks: [{ seq: 1, stream: 'stdout', chunk: big }], nextSeq: 2 } },
    ];
    for (const shape of shapes) {
      const text = JSON.stringify(shape);
      expect(parseLargeMessage(Buffer.from(text))).toEqual(shape);
      expectSameAsJsonParse(text);
    }
  });

  it('falls back to JSON.parse whenever the long stretch is not plainly one string value', () => {
    const cases: Record<string, string> = {
      escapes: JSON.stringify({ id: 1, result: { text: `${'a'.repeat(40_000)}"quoted"\\n${'b'.repeat(40_000)}` } }),
      'escape sequences': JSON.stringify({
        id: 1,
        result: { text: `${'a'.repeat(40_000)}\n\t\\${'b'.repeat(40_000)}` },
      }),
      'non-ASCII': JSON.stringify({ id: 1, result: { text: `${'é'.repeat(40_000)}` } }),
      'after an escaped quote': `{"id":1,"result":{"text":"x\\"${'c'.repeat(70_000)}"}}`,
      'raw control character (invalid JSON)': `{"id":1,"result":{"text":"${'d'.repeat(40_000)}\u0007${'d'.repeat(40_000)}"}}`,
      'no long string': JSON.stringify({ id: 1, result: { numbers: Array.from({ length: 20_000 }, (_, i) => i) } }),
      'a long stretch between strings': `{"id":1,"result":{"a":"x","b":[${'1,'.repeat(40_000)}1],"c":"y"}}`,
      'the placeholder already present': JSON.stringify({ id: 1, result: { chunk: big, other: '\u0001' } }),
      'two long strings': JSON.stringify({ id: 1, result: { a: big, b: base64(50 * 1024, 9) } }),
      'under __proto__': `{"id":1,"result":{"__proto__":"${big}"}}`,
      'truncated (malformed)': JSON.stringify({ id: 1, method: 'fs/writeBlock', params: { chunk: big } }).slice(0, -2),
      'trailing garbage (malformed)': `${JSON.stringify({ id: 1, result: { chunk: big } })}x`,
      'a long key': `{"id":1,"result":{"${'k'.repeat(70_000)}":1}}`,
      'not an object': JSON.stringify([big]),
      'a bare string': JSON.stringify(big),
    };
    for (const [name, text] of Object.entries(cases)) {
      expect(Buffer.byteLength(text), name).toBeGreaterThanOrEqual(64 * 1024);
      expectSameAsJsonParse(text);
    }
    // The ones the fast path must refuse (each would be wrong or differently wrong if taken).
    for (const name of [
      'escapes',
      'escape sequences',
      'non-ASCII',
      'after an escaped quote',
      'raw control character (invalid JSON)',
    ]) {
      expect(parseLargeMessage(Buffer.from(cases[name] as string)), name).toBeUndefined();
    }
    // `__proto__` is an own property, as JSON.parse makes it.
    const proto = parseMessage(Buffer.from(cases['under __proto__'] as string));
    expect(proto.kind === 'response' && Object.hasOwn(proto.result as object, '__proto__')).toBe(true);
  });
});
