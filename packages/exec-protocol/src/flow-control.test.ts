import { describe, expect, it } from 'vitest';
import { clampFlowWindow, MAX_FLOW_WINDOW_BYTES, MIN_FLOW_WINDOW_BYTES, ReceiveCredit, SendCredit } from './index.js';

describe('flow control credit', () => {
  it('the sender stops at the window and an acknowledgement reopens it once', () => {
    const credit = new SendCredit(100);
    expect(credit.sent(60)).toBe(true);
    expect(credit.sent(40)).toBe(false);
    expect(credit.open).toBe(false);
    expect(credit.acked(10)).toBe(true);
    expect(credit.inFlight).toBe(90);
    expect(credit.acked(10)).toBe(false);
    // More acknowledged than was sent counts as everything.
    credit.acked(1_000);
    expect(credit.inFlight).toBe(0);
  });

  it('the receiver acknowledges every quarter window, so a full window is always acknowledged', () => {
    const credit = new ReceiveCredit(100);
    expect(credit.consumed(24)).toBe(false);
    expect(credit.consumed(1)).toBe(true);
    credit.ackSent();
    expect(credit.pending).toBe(0);
    // A sender blocked on a full window: the receiver that consumed it all has asked to acknowledge.
    const sender = new SendCredit(100);
    const receiver = new ReceiveCredit(100);
    let acks = 0;
    while (sender.sent(10)) {
      /* fill the window */
    }
    for (let i = 0; i < 10; i++) {
      if (receiver.consumed(10)) {
        sender.acked(receiver.pending);
        receiver.ackSent();
        acks++;
      }
    }
    expect(acks).toBeGreaterThan(0);
    expect(sender.open).toBe(true);
  });

  it('clamps a requested window into the granted range', () => {
    expect(clampFlowWindow(1)).toBe(MIN_FLOW_WINDOW_BYTES);
    expect(clampFlowWindow(2 ** 40)).toBe(MAX_FLOW_WINDOW_BYTES);
    expect(clampFlowWindow(1_000_000.5)).toBe(1_000_000);
  });
});
