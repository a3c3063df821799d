import { describe, expect, it } from 'vitest';
import { toHex } from './__tests__/helpers.js';
import { buildRelayPrologue, encodePrologue, PROLOGUE_DOMAIN } from './prologue.js';

describe('relay prologue (rendezvous.md §4.4)', () => {
  it('matches the golden bytes from noise_channel_tests.rs', () => {
    const ascii = (text: string) => Buffer.from(text, 'ascii').toString('hex');
    const golden =
      `0000000000000020${ascii('codex-exec-server-relay-noise/v1')}` +
      `0000000000000005${ascii('env-1')}` +
      `000000000000000e${ascii('registration-1')}` +
      `0000000000000008${ascii('stream-1')}`;
    const bytes = buildRelayPrologue({
      environmentId: 'env-1',
      registrationId: 'registration-1',
      streamId: 'stream-1',
    });
    expect(toHex(bytes)).toBe(golden);
    expect(PROLOGUE_DOMAIN).toHaveLength(32);
  });

  it('is unambiguous: moving a byte between fields changes the bytes', () => {
    const a = encodePrologue(['ab', 'c']);
    const b = encodePrologue(['a', 'bc']);
    expect(toHex(a)).not.toBe(toHex(b));
  });

  it('length-prefixes UTF-8 bytes, not code units', () => {
    expect(toHex(encodePrologue(['é']))).toBe('0000000000000002c3a9');
    expect(toHex(encodePrologue([Uint8Array.of(1, 2)]))).toBe('00000000000000020102');
  });
});
