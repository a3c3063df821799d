import { expect, it } from 'vitest';
import { BoundedCache } from './cache.js';

it('keeps at most its capacity, dropping the oldest insertion first', () => {
  const cache = new BoundedCache<string, number>(2);
  cache.set('a', 1);
  cache.set('b', 2);
  cache.set('a', 10); // an update does not evict
  expect([cache.get('a'), cache.get('b'), cache.size]).toEqual([10, 2, 2]);
  cache.set('c', 3);
  expect([cache.get('a'), cache.get('b'), cache.get('c'), cache.size]).toEqual([undefined, 2, 3, 2]);
  cache.delete('b');
  cache.clear();
  expect(cache.size).toBe(0);
  expect(() => new BoundedCache(0)).toThrow();
});
