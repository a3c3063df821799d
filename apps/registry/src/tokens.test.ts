import { describe, expect, it } from 'vitest';
import { pickRelayNode } from './routing.js';
import { generateToken, globMatch, hashToken, matchesEnvironmentGlob } from './tokens.js';

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
    ['', 'x', false],
    ['**', '', true],
    ['*a', 'bba', true],
    ['*a', 'bab', false],
    ['a*b*c', 'aXbYbZc', true],
    ['a*b*c', 'aXbYcZ', false],
  ])('glob %j vs %j → %s', (pattern, id, expected) => {
    expect(matchesEnvironmentGlob(pattern, id)).toBe(expected);
  });

  /** The obvious exponential-time definition, for comparison on short inputs. */
  const reference = (p: string, t: string): boolean => {
    if (p === '') return t === '';
    if (p[0] === '*') return reference(p.slice(1), t) || (t !== '' && reference(p, t.slice(1)));
    return t !== '' && (p[0] === '?' || p[0] === t[0]) && reference(p.slice(1), t.slice(1));
  };

  it('agrees with the reference definition on every pattern and id over a small alphabet', () => {
    // Deterministic pseudo-random cases (LCG): patterns over {a, b, *, ?}, ids over {a, b}.
    let seed = 42;
    const next = (n: number) => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed % n;
    };
    let matched = 0;
    for (let i = 0; i < 5_000; i++) {
      const pattern = Array.from({ length: next(8) }, () => 'ab*?'[next(4)]).join('');
      const id = Array.from({ length: next(10) }, () => 'ab'[next(2)]).join('');
      const expected = reference(pattern, id);
      expect([pattern, id, matchesEnvironmentGlob(pattern, id)]).toEqual([pattern, id, expected]);
      if (expected) matched++;
    }
    expect(matched).toBeGreaterThan(500); // both outcomes are well covered
  });

  it('takes at most (pattern+1)×(id+1) steps: a pattern that makes a backtracking RegExp hang is answered at once', () => {
    const pattern = '*a*a*a*a*a*a*a*a*b';
    const id = 'a'.repeat(128);
    const { matched, steps } = globMatch(pattern, id);
    expect(matched).toBe(false);
    expect(steps).toBeLessThanOrEqual((pattern.length + 1) * (id.length + 1));
    // Through the public function too (the RegExp it replaces does not return on this input for hours).
    expect(matchesEnvironmentGlob(pattern, id)).toBe(false);
    expect(matchesEnvironmentGlob(`${pattern.slice(0, -1)}a`, id)).toBe(true);
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
