import { describe, expect, it } from 'vitest';
import { encodeBase64Response, encodeOutputNotification, encodeWriteBlockRequest } from './wire.js';

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

describe('encodeWriteBlockRequest', () => {
  it('equals JSON.stringify of the request, for every length mod 3 and odd ids', () => {
    for (const length of [0, 1, 2, 3, 4, 5, 1000, 65_537]) {
      const bytes = Buffer.alloc(length, 0).map((_, i) => (i * 131) & 0xff) as Buffer;
      for (const id of [1, 12345, 'str-id', 'quote"and\\back']) {
        for (const handleId of ['h1', 'w7-1a2b3c4d', 'ünïcode']) {
          const expected = JSON.stringify({
            id,
            method: 'fs/writeBlock',
            params: { handleId, offset: 1_048_576 * 3, chunk: Buffer.from(bytes).toString('base64') },
          });
          expect(encodeWriteBlockRequest(id, handleId, 1_048_576 * 3, Buffer.from(bytes)).toString('utf8')).toBe(
            expected,
          );
        }
      }
    }
  });
});
