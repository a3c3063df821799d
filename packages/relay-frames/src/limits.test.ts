import { describe, expect, it } from 'vitest';
import { FRAME_KINDS } from './frame.js';
import * as surface from './index.js';
import { RELAY_LIMITS } from './limits.js';

describe('wire contract constants', () => {
  it('hold the values codex uses (spec §3.3, §3.5, §3.7)', () => {
    expect({ ...RELAY_LIMITS }).toEqual({
      RELAY_PROTOCOL_VERSION: 1,
      MAX_FRAME_BYTES: 262_144,
      MAX_STREAM_ID_BYTES: 128,
      MAX_RESET_REASON_BYTES: 256,
      MAX_RECORD_PLAINTEXT_BYTES: 61_440,
      MESSAGE_LENGTH_PREFIX_BYTES: 4,
      MAX_MESSAGE_BYTES: 67_108_864,
      MAX_REORDER_DISTANCE: 64,
      MAX_REORDER_RECORDS: 64,
      MAX_REORDER_BYTES: 1_048_576,
      MAX_SEQ: 4_294_967_295,
    });
  });

  it('are frozen and exported one by one with the same values', () => {
    expect(Object.isFrozen(RELAY_LIMITS)).toBe(true);
    expect(() => {
      (RELAY_LIMITS as { MAX_FRAME_BYTES: number }).MAX_FRAME_BYTES = 1;
    }).toThrow(TypeError);
    expect(surface).toMatchObject(RELAY_LIMITS);
  });

  it('name every body kind of the oneof, frozen', () => {
    expect(FRAME_KINDS).toEqual(['data', 'ack', 'resume', 'reset', 'heartbeat', 'handshake']);
    expect(Object.isFrozen(FRAME_KINDS)).toBe(true);
  });
});
