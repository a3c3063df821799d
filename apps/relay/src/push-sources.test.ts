import { describe, expect, it } from 'vitest';
import { PUSH_SOURCES_REFRESH_MS, PushSources } from './push-sources.js';

describe('PushSources: where revocation pushes are taken from', () => {
  it('any address when the registry is not known', () => {
    const sources = PushSources.any();
    expect(sources.known).toBe(false);
    expect(sources.allows('203.0.113.9')).toBe(true);
    expect(sources.entries()).toBeNull();
  });

  it('the given IPs and CIDR blocks only (an IPv4-mapped peer counts as its IPv4 address)', () => {
    const sources = PushSources.fixed(['10.0.0.0/8', '::1']);
    expect(sources.allows('10.1.2.3')).toBe(true);
    expect(sources.allows('::ffff:10.1.2.3')).toBe(true);
    expect(sources.allows('::1')).toBe(true);
    expect(sources.allows('127.0.0.1')).toBe(false);
    expect(() => PushSources.fixed(['registry.example'])).toThrow(/not an IP address/);
  });

  it('a registry URL with an IP literal: that address', async () => {
    const { sources, ready } = PushSources.ofRegistry('http://[::1]:8080');
    expect(await ready).toEqual(['::1']);
    expect(sources.allows('::1')).toBe(true);
    expect(sources.allows('127.0.0.1')).toBe(false);
  });

  it('a registry host name: the addresses it resolves to, resolved again (at most every 30 s) on a miss', async () => {
    let clock = 0;
    let answer: string[] | Error = ['192.0.2.1', '2001:db8::1'];
    const asked: string[] = [];
    const resolver = async (host: string) => {
      asked.push(host);
      if (answer instanceof Error) throw answer;
      return answer;
    };
    const { sources, ready } = PushSources.ofRegistry('https://registry.example:8443/base', {
      resolver,
      now: () => clock,
    });
    expect(await ready).toEqual(['192.0.2.1', '2001:db8::1']);
    expect(sources.allows('192.0.2.1')).toBe(true);
    expect(sources.allows('2001:db8::1')).toBe(true);
    // The registry moved: a push from its new address is refused until the next resolution, rate-limited.
    answer = ['192.0.2.2'];
    expect(sources.allows('192.0.2.2')).toBe(false);
    await sources.settled();
    expect(asked).toEqual(['registry.example']);
    clock += PUSH_SOURCES_REFRESH_MS;
    expect(sources.allows('192.0.2.2')).toBe(false);
    await sources.settled();
    expect(asked).toHaveLength(2);
    expect(sources.allows('192.0.2.2')).toBe(true);
    expect(sources.allows('192.0.2.1')).toBe(false);
  });

  it('a registry host that does not resolve: no address until it does (fail closed)', async () => {
    let clock = 0;
    let fail = true;
    const resolver = async () => {
      if (fail) throw new Error('ENOTFOUND');
      return ['192.0.2.1'];
    };
    const { sources, ready } = PushSources.ofRegistry('http://registry.example', { resolver, now: () => clock });
    expect(await ready).toBeInstanceOf(Error);
    expect(sources.known).toBe(true);
    expect(sources.allows('192.0.2.1')).toBe(false);
    fail = false;
    clock += PUSH_SOURCES_REFRESH_MS;
    expect(sources.allows('192.0.2.1')).toBe(false);
    await sources.settled();
    expect(sources.allows('192.0.2.1')).toBe(true);
  });
});

describe('PushSources.of: --revocation-push-from’s IPs, blocks and host names', () => {
  it('takes the blocks at once and the host names’ addresses once resolved; refuses anything else', async () => {
    const { sources, ready } = PushSources.of(['10.0.0.0/8', 'registry-pods'], {
      resolver: async (host) => (host === 'registry-pods' ? ['10.1.0.7', '192.0.2.7'] : []),
    });
    expect(await ready).toEqual(['10.0.0.0/8', '10.1.0.7', '192.0.2.7']);
    expect(sources.allows('10.9.9.9')).toBe(true);
    expect(sources.allows('192.0.2.7')).toBe(true);
    expect(sources.allows('192.0.2.8')).toBe(false);
    expect(() => PushSources.validate(['registry pods'])).toThrow(/not an IP address, CIDR block or host name/);
    expect(() => PushSources.validate(['10.0.0.0/40'])).toThrow(/not an IP address or CIDR block/);
    expect(() => PushSources.validate(['registry.internal', 'localhost', '::1', '2001:db8::/32'])).not.toThrow();
  });
});
