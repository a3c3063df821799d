import { describe, expect, it } from 'vitest';
import { OutboundRequests } from './outbound.js';

function harness(maxPending = 2, sends = true) {
  const sent: { id: number; method: string; params: unknown }[] = [];
  const requests = new OutboundRequests({
    maxPending,
    send: (id, method, params) => {
      sent.push({ id, method, params });
      return sends;
    },
  });
  return { sent, requests };
}

describe('OutboundRequests', () => {
  it('numbers requests from 1 and settles each with its own answer', async () => {
    const { sent, requests } = harness();
    const first = requests.request('a/b', { x: 1 }, 60_000);
    const second = requests.request('a/b', { x: 2 }, 60_000);
    expect(sent.map((s) => s.id)).toEqual([1, 2]);
    expect(requests.settle(2, { error: { code: -1, message: 'no' } })).toBe(true);
    expect(requests.settle(1, { result: { ok: true } })).toBe(true);
    await expect(first).resolves.toEqual({ kind: 'result', result: { ok: true } });
    await expect(second).resolves.toEqual({ kind: 'error', error: { code: -1, message: 'no' } });
    // Answered once: a repeated or unknown id is a stray answer.
    expect(requests.settle(1, { result: null })).toBe(false);
    expect(requests.settle('1', { result: null })).toBe(false);
    expect(requests.size).toBe(0);
  });

  it('answers none past maxPending without sending, and when the wait runs out', async () => {
    const { sent, requests } = harness(1);
    const waiting = requests.request('m', null, 10);
    await expect(requests.request('m', null, 60_000)).resolves.toMatchObject({ kind: 'none' });
    expect(sent).toHaveLength(1);
    await expect(waiting).resolves.toEqual({ kind: 'none', reason: 'no answer to m within 10 ms' });
    expect(requests.settle(1, { result: 'late' })).toBe(false);
  });

  it('answers none when the request cannot be sent, and everything pending once closed', async () => {
    const unsendable = harness(2, false);
    await expect(unsendable.requests.request('m', null, 60_000)).resolves.toEqual({
      kind: 'none',
      reason: 'the connection is closed',
    });
    const { sent, requests } = harness();
    const pending = requests.request('m', null, 60_000);
    requests.close('connection closed: bye');
    await expect(pending).resolves.toEqual({ kind: 'none', reason: 'connection closed: bye' });
    await expect(requests.request('m', null, 60_000)).resolves.toEqual({
      kind: 'none',
      reason: 'connection closed: bye',
    });
    expect(sent).toHaveLength(1);
  });
});
