import { describe, expect, it } from 'vitest';
import { describeParticipant } from './shared.js';

describe('describeParticipant', () => {
  it('says who, what they may do, ownership, sessions and which one is this page, as text', () => {
    expect(describeParticipant({ who: 'key_a', access: 'control', owner: true, sessions: 1, you: false })).toBe(
      'key_a: controls, owner',
    );
    expect(
      describeParticipant({ who: 'share link of key_a', access: 'view', owner: false, sessions: 2, you: true }),
    ).toBe('share link of key_a (you): watches, 2 sessions');
    // Markup from the executor is text, not markup (the page sets textContent).
    expect(describeParticipant({ who: '<b>x</b>', access: 'view', owner: false, sessions: 1, you: false })).toBe(
      '<b>x</b>: watches',
    );
  });
});
