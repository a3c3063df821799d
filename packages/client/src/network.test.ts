import { type PeerHandle, startPeer } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Environment } from './environment-node.js';
import { ExecServerClient } from './exec-client-node.js';
import { checkNetworkHosts, managedNetworkParams, type NetworkDecision, networkDecisionOf } from './network.js';

describe('managedNetworkParams', () => {
  it('asks for Codex’s managed proxy with the hosts as its domains, a denial winning over an allowance', () => {
    const params = managedNetworkParams(
      { allow: ['Example.COM', '**.example.org', 'both.example'], deny: ['both.example'] },
      'p-1',
      null,
    );
    expect(params).toEqual({
      sandbox: { permissions: { type: 'disabled' }, windowsSandboxLevel: 'disabled' },
      enforceManagedNetwork: true,
      networkProxy: {
        proxy: {
          enabled: true,
          enableSocks5: false,
          enableSocks5Udp: false,
          allowUpstreamProxy: false,
          dangerouslyAllowAllUnixSockets: false,
          mode: 'full',
          domains: { 'example.com': 'allow', '**.example.org': 'allow', 'both.example': 'deny' },
          unixSockets: null,
          allowLocalBinding: false,
        },
        auditMetadata: { originator: 'tether' },
        environmentId: null,
        executionId: 'p-1',
      },
    });
    // A start's own sandbox is kept (its network must let the command reach the proxy: the caller's part).
    const sandbox = { permissions: { type: 'managed' } };
    expect(managedNetworkParams({ allow: ['a.example'], mode: 'limited' }, 'p', sandbox)).toMatchObject({
      sandbox,
      networkProxy: { proxy: { mode: 'limited' } },
    });
  });

  it('refuses what is not a host, an address or a scoped wildcard, naming the list', () => {
    for (const bad of ['*', '**', '', 'a b', 'http://x', 'a..b', 'x/y']) {
      expect(() => checkNetworkHosts([bad], '--network-allow')).toThrow(/^--network-allow: /);
    }
    expect(() => managedNetworkParams({ deny: ['*'] }, 'p', null)).toThrow(/^network\.deny: "\*" is not/);
    for (const good of ['example.com', '*.example.com', '**.example.com', '127.0.0.1', '::1', 'host_1']) {
      expect(() => checkNetworkHosts([good], 'x')).not.toThrow();
    }
  });
});

describe('networkDecisionOf', () => {
  const decision = {
    processId: 'p',
    timestamp: '2026-12-07T00:00:00.000Z',
    scope: 'domain',
    decision: 'deny',
    source: 'baseline_policy',
    reason: 'not_allowed',
    protocol: 'http',
    host: 'x.invalid',
    port: 80,
    method: 'GET',
    client: '127.0.0.1:1',
    policyOverride: false,
  };

  it('keeps what a caller reads of a well-formed decision and drops one that is not (the executor is untrusted)', () => {
    expect(networkDecisionOf(decision)).toEqual({
      processId: 'p',
      decision: 'deny',
      reason: 'not_allowed',
      protocol: 'http',
      host: 'x.invalid',
      port: 80,
      method: 'GET',
      timestamp: '2026-12-07T00:00:00.000Z',
    });
    for (const bad of [
      null,
      'deny',
      { ...decision, port: '80' },
      { ...decision, decision: 'maybe' },
      { ...decision, host: undefined },
    ]) {
      expect(networkDecisionOf(bad)).toBeNull();
    }
  });
});

describe('Environment.spawn({network})', () => {
  let peer: PeerHandle;
  beforeAll(async () => {
    peer = await startPeer({ kind: 'tether', transport: 'ws' });
  });
  afterAll(async () => {
    await peer?.close();
  });

  it('confines the process to the hosts allowed; each decision reaches onNetworkDecision of that process only', async () => {
    const env = Environment.remote(await ExecServerClient.connectWebSocket(peer.url!));
    try {
      const decisions: NetworkDecision[] = [];
      const other: NetworkDecision[] = [];
      const bystander = await env.spawn(['sleep', '5'], { onNetworkDecision: (d) => other.push(d) });
      const script = 'curl -s -m 10 -o /dev/null -w "%{http_code}" http://denied.invalid/';
      const result = await env.exec(['bash', '-c', script], {
        network: { allow: ['allowed.invalid'] },
        onNetworkDecision: (d) => decisions.push(d),
      });
      expect(result.exitCode).toBe(0);
      expect(result.stdout.toString()).toBe('403');
      expect(decisions).toMatchObject([{ decision: 'deny', reason: 'not_allowed', host: 'denied.invalid', port: 80 }]);
      expect(other).toEqual([]);
      await bystander.terminate();
    } finally {
      await env.close();
    }
  });

  it('a local environment cannot confine a network: said before anything runs', async () => {
    const env = Environment.local();
    try {
      await expect(env.spawn(['true'], { network: { allow: ['x.example'] } })).rejects.toThrow(
        'a confined network needs an executor (Environment.connect…), not a local environment',
      );
    } finally {
      await env.close();
    }
  });
});
