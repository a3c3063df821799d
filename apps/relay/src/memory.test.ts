import { describe, expect, it } from 'vitest';
import { ExpiringMap } from './memory.js';

describe('ExpiringMap (the relay’s bounded memory of revocations and epochs)', () => {
  it('keeps an entry for its lifetime from the last set, then forgets it', () => {
    const map = new ExpiringMap<number>(10, 1_000);
    map.set('a', 1, 0);
    expect(map.get('a', 999)).toBe(1);
    map.set('a', 2, 500);
    expect(map.get('a', 1_499)).toBe(2);
    expect(map.get('a', 1_500)).toBeUndefined();
    expect(map.size).toBe(0);
  });

  it('holds at most its capacity, evicting the oldest first and reporting how many', () => {
    const map = new ExpiringMap<number>(3, 60_000);
    for (const [i, key] of ['a', 'b', 'c'].entries()) expect(map.set(key, i, i)).toBe(0);
    map.set('a', 10, 3); // refreshed: now the newest
    expect(map.set('d', 4, 4)).toBe(1);
    expect(map.size).toBe(3);
    expect(map.get('b', 5)).toBeUndefined();
    expect([map.get('a', 5), map.get('c', 5), map.get('d', 5)]).toEqual([10, 2, 4]);
  });

  it('prunes expired entries on set, so they do not count against the capacity', () => {
    const map = new ExpiringMap<true>(2, 100);
    map.set('old-1', true, 0);
    map.set('old-2', true, 1);
    expect(map.set('new', true, 200)).toBe(0);
    expect(map.size).toBe(1);
  });

  it('refuses a capacity that is not a positive integer', () => {
    expect(() => new ExpiringMap(0, 1)).toThrow(RangeError);
  });
});
