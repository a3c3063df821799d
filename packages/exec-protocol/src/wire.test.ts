import { describe, expect, it } from 'vitest';
import { encodeOutputNotification } from './wire.js';

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
