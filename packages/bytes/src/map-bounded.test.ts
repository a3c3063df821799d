import { describe, expect, it } from 'vitest';
import { mapBounded } from './map-bounded.js';

describe('mapBounded', () => {
  it('keeps the order of the items and never runs more than the bound at once', async () => {
    let running = 0;
    let most = 0;
    const results = await mapBounded([5, 1, 4, 2, 3], 2, async (item, index) => {
      running++;
      most = Math.max(most, running);
      await new Promise((resolve) => setTimeout(resolve, item));
      running--;
      return `${index}:${item}`;
    });
    expect(results).toEqual(['0:5', '1:1', '2:4', '3:2', '4:3']);
    expect(most).toBe(2);
  });

  it('answers an empty list with an empty one', async () => {
    expect(await mapBounded([], 8, async () => 1)).toEqual([]);
  });
});
