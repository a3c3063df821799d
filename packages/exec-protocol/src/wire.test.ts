import { describe, expect, it } from 'vitest';
import { encodeBase64Response, encodeOutputNotification } from './wire.js';

describe('encodeOutputNotification', () => {
  it('produces exactly the JSON of the generic serialization', () => {
    for (const [processId, chunk] of [
      ['p1', Buffer.from('hello\n')],
      ['quote"and\\slash', Buffer.alloc(0)],
      ['ünïcødé ✓', Buffer.from([0, 255, 1, 254, 2])],
      ['big', Buffer.alloc(300_000, 7)],
    ] as const) {
      const expected = {
        method: 'process/output',
        params: { processId, seq: 42, stream: 'stdout', chunk: chunk.toString('base64') },
      };
      expect(encodeOutputNotification(processId, 42, 'stdout', chunk).toString('utf8')).toBe(JSON.stringify(expected));
    }
  });
});

describe('encodeBase64Response', () => {
  it('produces exactly the JSON of the generic serialization', () => {
    for (const [id, bytes, rest] of [
      [7, Buffer.from('hello'), { eof: false }],
      ['str "id"', Buffer.alloc(0), { eof: true }],
      [-3, Buffer.alloc(1024 * 1024 + 1, 9), {}],
      [0, Buffer.from([0, 255, 1]), { eof: true, size: 3 }],
    ] as const) {
      const expected = { id, result: { chunk: bytes.toString('base64'), ...rest } };
      expect(encodeBase64Response(id, 'chunk', bytes, rest).toString('utf8')).toBe(JSON.stringify(expected));
    }
  });
});
