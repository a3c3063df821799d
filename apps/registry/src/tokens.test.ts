import { describe, expect, it } from 'vitest';
import { pickRelayNode } from './routing.js';
import { generateToken, hashToken, matchesEnvironmentGlob } from './tokens.js';

describe('tokens and routing', () => {
  it('tokens are random and hashed with SHA-256', () => {
    const a = generateToken();
    expect(a).toMatch(/^treg_[A-Za-z0-9_-]{43}$/);
    expect(generateToken()).not.toBe(a);
    expect(hashToken('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
  });

  it.each([
    ['dev-*', 'dev-1', true],
    ['dev-*', 'dev-', true],
    ['dev-*', 'prod-1', false],
    ['*', 'anything', true],
    ['a?c', 'abc', true],
    ['a?c', 'ac', false],
    ['exact', 'exact', true],
    ['exact', 'exactly', false],
    ['a.c', 'abc', false],
  ])('glob %j vs %j → %s', (pattern, id, expected) => {
    expect(matchesEnvironmentGlob(pattern, id)).toBe(expected);
  });

  it('rendezvous hashing is stable and moves only the removed node’s environments', () => {
    const nodes = ['ws://a', 'ws://b', 'ws://c'];
    expect(pickRelayNode([], 'x')).toBeUndefined();
    const before = new Map(Array.from({ length: 300 }, (_, i) => [`e${i}`, pickRelayNode(nodes, `e${i}`)]));
    const counts = new Map<string, number>();
    for (const node of before.values()) counts.set(node as string, (counts.get(node as string) ?? 0) + 1);
    for (const node of nodes) expect(counts.get(node)).toBeGreaterThan(60);
    for (const [env, node] of before) {
      const after = pickRelayNode(['ws://a', 'ws://c'], env);
      if (node !== 'ws://b') expect(after).toBe(node);
    }
  });
});
