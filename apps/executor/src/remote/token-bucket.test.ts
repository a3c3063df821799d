import { describe, expect, it } from 'vitest';
import { KeyedTokenBuckets, TokenBucket } from './token-bucket.js';

describe('TokenBucket', () => {
  it('allows a burst, then one per refill period, never more than the burst after a quiet spell', () => {
    let now = 0;
    const bucket = new TokenBucket({ burst: 3, refillMs: 1_000 }, () => now);
    expect([bucket.take(), bucket.take(), bucket.take(), bucket.take()]).toEqual([true, true, true, false]);
    now += 999;
    expect(bucket.take()).toBe(false);
    now += 1;
    expect(bucket.take()).toBe(true);
    expect(bucket.take()).toBe(false);
    now += 60_000;
    expect(bucket.available).toBe(3);
    expect(bucket.full).toBe(true);
  });

  it('refuses a bucket that could never hold a token', () => {
    expect(() => new TokenBucket({ burst: 0, refillMs: 1 })).toThrow(RangeError);
    expect(() => new TokenBucket({ burst: 1, refillMs: 0 })).toThrow(RangeError);
  });
});

describe('KeyedTokenBuckets', () => {
  it('keeps one budget per key', () => {
    let now = 0;
    const buckets = new KeyedTokenBuckets({ burst: 1, refillMs: 1_000, maxKeys: 10 }, () => now);
    expect([buckets.take('a'), buckets.take('a'), buckets.take('b')]).toEqual([true, false, true]);
    now += 1_000;
    expect(buckets.take('a')).toBe(true);
  });

  it('stays within maxKeys however many keys it sees, forgetting full buckets before spent ones', () => {
    let now = 0;
    const buckets = new KeyedTokenBuckets({ burst: 2, refillMs: 1_000, maxKeys: 3 }, () => now);
    buckets.take('spent');
    buckets.take('spent');
    for (let i = 0; i < 10_000; i++) {
      buckets.take(`fresh-${i}`);
      now += 1_000; // every fresh key's bucket is full again by the next insertion
    }
    expect(buckets.size).toBeLessThanOrEqual(3);
  });

  it('forgets the least recently used key when every bucket is spent', () => {
    const buckets = new KeyedTokenBuckets({ burst: 1, refillMs: 1_000, maxKeys: 2 }, () => 0);
    buckets.take('a');
    buckets.take('b');
    buckets.take('a'); // a is now the most recently used
    buckets.take('c'); // evicts b
    expect(buckets.size).toBe(2);
    expect(buckets.take('a')).toBe(false); // still remembered, still spent
    expect(buckets.take('b')).toBe(true); // forgotten: a fresh budget
  });
});
