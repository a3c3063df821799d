import { describe, expect, it } from 'vitest';
import { routeToExecutor } from './routing.js';

const registration = { environmentId: 'dev-1', relayUrl: 'ws://a' };
const configured = ['ws://a', 'ws://b'];

describe('routeToExecutor: is the executor linked on its node', () => {
  it('up when the link was in its node’s last heartbeat, even if the live list was read after a newer one', () => {
    // A replica read the live list just after ws://a's heartbeat at 2 000 and the link (cached, or read a moment
    // before) as of the heartbeat at 1 000 that also listed it: the link is current as of its own read.
    const route = routeToExecutor(
      registration,
      configured,
      [
        { url: 'ws://a', lastSeen: 2_000 },
        { url: 'ws://b', lastSeen: 2_000 },
      ],
      { environmentId: 'dev-1', relayUrl: 'ws://a', lastSeen: 1_000, nodeLastSeen: 1_000 },
    );
    expect(route).toEqual({ node: 'ws://a', status: 'up', lastSeen: 1_000 });
  });

  it('down when the node has sent a heartbeat since that did not list it', () => {
    const route = routeToExecutor(registration, configured, [{ url: 'ws://a', lastSeen: 2_000 }], {
      environmentId: 'dev-1',
      relayUrl: 'ws://a',
      lastSeen: 1_000,
      nodeLastSeen: 2_000,
    });
    expect(route).toEqual({ node: 'ws://a', status: 'down', lastSeen: 1_000 });
  });

  it('down when the node is not live, or the link is on another node; unknown with no node live', () => {
    const link = { environmentId: 'dev-1', relayUrl: 'ws://a', lastSeen: 1_000, nodeLastSeen: 1_000 };
    expect(routeToExecutor(registration, configured, [{ url: 'ws://b', lastSeen: 1_000 }], link).status).toBe('down');
    expect(
      routeToExecutor(registration, configured, [{ url: 'ws://a', lastSeen: 1_000 }], { ...link, relayUrl: 'ws://b' })
        .status,
    ).toBe('down');
    expect(routeToExecutor(registration, configured, [], link).status).toBe('unknown');
  });
});
