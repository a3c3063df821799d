import { describe, expect, it } from 'vitest';
import { TrustedProxies, TrustProxyError } from './client-address.js';

describe('the client address behind trusted proxies', () => {
  it('trusts nothing by default: the socket peer, whatever the header says', () => {
    const none = TrustedProxies.none();
    expect(none.clientAddress('127.0.0.1', '203.0.113.9')).toBe('127.0.0.1');
    expect(none.clientAddress('::ffff:10.0.0.1', undefined)).toBe('10.0.0.1');
    expect(none.clientAddress(undefined, '203.0.113.9')).toBe('unknown');
  });

  it('takes the rightmost hop that is not a trusted proxy', () => {
    const trusted = TrustedProxies.parse(['10.0.0.0/8', '127.0.0.1']);
    expect(trusted.clientAddress('10.1.2.3', '198.51.100.7')).toBe('198.51.100.7');
    // A client cannot pick its address by prepending hops: the nearest untrusted one counts.
    expect(trusted.clientAddress('10.1.2.3', '1.1.1.1, 198.51.100.7, 10.9.9.9')).toBe('198.51.100.7');
    expect(trusted.clientAddress('::ffff:127.0.0.1', ['198.51.100.7', '10.0.0.2'])).toBe('198.51.100.7');
    // An untrusted peer's header is ignored.
    expect(trusted.clientAddress('192.0.2.1', '198.51.100.7')).toBe('192.0.2.1');
    // Every hop trusted: the leftmost.
    expect(trusted.clientAddress('10.1.2.3', '10.0.0.5, 10.0.0.6')).toBe('10.0.0.5');
    // A hop that is no address stops the walk at the last trusted proxy.
    expect(trusted.clientAddress('10.1.2.3', '198.51.100.7, garbage')).toBe('10.1.2.3');
    expect(trusted.clientAddress('10.1.2.3', '')).toBe('10.1.2.3');
  });

  it('handles IPv6 blocks', () => {
    const trusted = TrustedProxies.parse(['fd00::/8']);
    expect(trusted.trusts('fd12::1')).toBe(true);
    expect(trusted.trusts('2001:db8::1')).toBe(false);
    expect(trusted.clientAddress('fd12::1', '2001:db8::1')).toBe('2001:db8::1');
  });

  it('refuses entries that are not IPs or CIDR blocks', () => {
    for (const bad of ['10.0.0.0/33', 'example.com', '10.0.0.1/8/1', '::1/129', '10.0.0.0/x', '']) {
      expect(() => TrustedProxies.parse([bad]), bad).toThrow(TrustProxyError);
    }
  });
});
