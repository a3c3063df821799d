import { InvalidArgumentError } from 'commander';
import { describe, expect, it } from 'vitest';
import { durationArg, formatDuration, parseDuration, parseListenAddress } from './cli-values.js';

describe('durations', () => {
  it('take ms, s, m and h, and a bare number in the flag’s old unit', () => {
    expect(parseDuration('500ms', 's')).toBe(500);
    expect(parseDuration('30s', 'ms')).toBe(30_000);
    expect(parseDuration('5m', 'ms')).toBe(300_000);
    expect(parseDuration('1h', 's')).toBe(3_600_000);
    expect(parseDuration('1.5s', 'ms')).toBe(1500);
    expect(parseDuration('10000', 'ms')).toBe(10_000);
    expect(parseDuration('20', 's')).toBe(20_000);
    expect(parseDuration('0.25', 's')).toBe(250);
    expect(parseDuration(' 2m ', 's')).toBe(120_000);
  });

  it('refuse anything else with a usage error that says what a duration is', () => {
    for (const bad of ['', 'soon', '-1', '-1s', '1d', '1 s', '1e3', 's', '.5s', '1.s', '0x10', '9'.repeat(30)]) {
      expect(() => parseDuration(bad, 's'), bad).toThrow(InvalidArgumentError);
    }
    expect(() => parseDuration('soon', 's')).toThrow(
      'expected a duration such as 500ms, 30s, 5m or 1h (a bare number is seconds), got "soon"',
    );
    expect(() => parseDuration('x', 'ms')).toThrow('(a bare number is milliseconds)');
  });

  it('are shown in the largest whole unit', () => {
    expect([10_000, 300_000, 3_600_000, 86_400_000, 1500, 250, 0].map(formatDuration)).toEqual([
      '10s',
      '5m',
      '1h',
      '24h',
      '1500ms',
      '250ms',
      '0ms',
    ]);
  });

  it('are checked against a flag’s bounds', () => {
    const positive = durationArg({ bare: 's' });
    expect(positive('2')).toBe(2000);
    expect(() => positive('0')).toThrow('expected a duration more than 0, got "0"');
    const bounded = durationArg({ bare: 's', min: 0, max: 3_600_000 });
    expect(bounded('0')).toBe(0);
    expect(() => bounded('2h')).toThrow('expected a duration from 0 to 1h, got "2h"');
    const whole = durationArg({ bare: 's', min: 1000, max: 900_000, wholeSeconds: true });
    expect(whole('2m')).toBe(120_000);
    expect(() => whole('1500ms')).toThrow('expected whole seconds, got "1500ms"');
    expect(() => whole('500ms')).toThrow('expected a duration at least 1s and at most 15m, got "500ms"');
  });
});

describe('listen addresses', () => {
  it('take HOST:PORT and the server’s URL of it', () => {
    expect(parseListenAddress('127.0.0.1:8081', 'ws')).toEqual({ host: '127.0.0.1', port: 8081 });
    expect(parseListenAddress('ws://0.0.0.0:0', 'ws')).toEqual({ host: '0.0.0.0', port: 0 });
    expect(parseListenAddress('http://localhost:8080/', 'http')).toEqual({ host: 'localhost', port: 8080 });
    expect(parseListenAddress('[::1]:9', 'http')).toEqual({ host: '::1', port: 9 });
    expect(parseListenAddress('HTTP://[::]:80', 'http')).toEqual({ host: '::', port: 80 });
  });

  it('refuse another scheme, a path, a missing or too large port', () => {
    expect(() => parseListenAddress('http://127.0.0.1:1', 'ws')).toThrow(
      'expected HOST:PORT or ws://HOST:PORT (port 0 picks a free one), got a http:// URL',
    );
    for (const bad of ['127.0.0.1', 'ws://127.0.0.1', 'ws://h:1/x', 'h:65536', ':80', 'h:-1', 'ws://user@h:1']) {
      expect(() => parseListenAddress(bad, 'ws'), bad).toThrow(InvalidArgumentError);
    }
  });
});
