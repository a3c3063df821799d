import { describe, expect, it } from 'vitest';
import { isLoopbackHost } from './rendezvous.js';

describe('isLoopbackHost', () => {
  it('is true for localhost, 127.0.0.0/8 and ::1 only', () => {
    for (const host of [
      'localhost',
      'LOCALHOST',
      'localhost.',
      '127.0.0.1',
      '127.255.0.9',
      '::1',
      '[::1]',
      '::ffff:127.0.0.1',
    ]) {
      expect(isLoopbackHost(host), host).toBe(true);
    }
    for (const host of [
      '0.0.0.0',
      '::',
      '10.0.0.1',
      '128.0.0.1',
      '127.0.0.256',
      'localhost.example',
      '127.0.0.1.example',
      '[::2]',
    ]) {
      expect(isLoopbackHost(host), host).toBe(false);
    }
  });
});
