// What the managed-network conformance files share: the `networkProxy` Codex's agent sends, and the decisions
// a client was sent.

import type { TestClient } from '@tether/test-kit';
import { expect } from 'vitest';

/** `networkProxy` as the agent sends it, `proxy` fields and the launch's own overridden as given. */
export const proxyConfig = (overrides: Record<string, unknown>, launch: Record<string, unknown> = {}) => ({
  proxy: {
    enabled: true,
    // Without a SOCKS5 listener ALL_PROXY names the HTTP one (the SOCKS5 case turns it on).
    enableSocks5: false,
    enableSocks5Udp: false,
    allowUpstreamProxy: true,
    dangerouslyAllowAllUnixSockets: false,
    mode: 'full',
    domains: null,
    unixSockets: null,
    allowLocalBinding: false,
    ...overrides,
  },
  auditMetadata: { conversationId: 'conformance', appVersion: '0.171.0', originator: 'codex_exec' },
  environmentId: 'remote',
  executionId: 'execution-1',
  ...launch,
});

/**
 * The `network/policyDecision`s `rpc` was sent, without their timestamp (checked to be one) and client (checked to
 * be on 127.0.0.1: ours through the relay reports its own, 127.0.0.1:0, Codex's its helper's port), `port` (the
 * origin's) written `<origin>`.
 */
export function policyDecisions(rpc: TestClient, port: number): Record<string, unknown>[] {
  return rpc.notifications
    .filter((n) => n.method === 'network/policyDecision')
    .map((n) => {
      const { timestamp, client: from, ...rest } = n.params as Record<string, unknown>;
      expect(Number.isNaN(Date.parse(String(timestamp)))).toBe(false);
      expect(from).toMatch(/^127\.0\.0\.1:\d+$/);
      return { ...rest, port: rest.port === port ? '<origin>' : rest.port };
    });
}
