import { MIN_FLOW_WINDOW_BYTES } from '@tether/exec-protocol';
import { describe, expect, it } from 'vitest';
import { OutputBudget } from './output-budget.js';

describe('OutputBudget', () => {
  it('shares the budget among its members, never below the smallest window', () => {
    const budget = new OutputBudget(1024 * 1024);
    expect(budget.share).toBe(1024 * 1024);
    const leaves = Array.from({ length: 4 }, () => budget.join());
    expect(budget.share).toBe(256 * 1024);
    const many = Array.from({ length: 100 }, () => budget.join());
    expect(budget.share).toBe(MIN_FLOW_WINDOW_BYTES);
    for (const leave of [...leaves, ...many]) leave();
    expect(budget.members).toBe(0);
  });

  it('tells its listeners when shares grow, once per member that leaves', () => {
    const budget = new OutputBudget(1024 * 1024);
    let calls = 0;
    const stop = budget.onLoosened(() => calls++);
    const leave = budget.join();
    leave();
    leave();
    expect(calls).toBe(1);
    stop();
    budget.join()();
    expect(calls).toBe(1);
  });
});
