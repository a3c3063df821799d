import { type PeerHandle, startPeer } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Environment } from './environment-node.js';
import { ExecServerClient } from './exec-client-node.js';
import {
  answerNetworkQuestion,
  checkNetworkHosts,
  managedNetworkParams,
  type NetworkDecision,
  type NetworkQuestion,
  networkDecisionOf,
} from './network.js';

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

describe('managedNetworkParams with ask', () => {
  it('opts in to questions (policyDecisionTimeoutMs, default 30 s) and sends the hosts under review', () => {
    const ask = () => 'allow' as const;
    const params = managedNetworkParams({ allow: ['a.example'], review: ['B.example'], ask }, 'p', null);
    expect(params.networkProxy.policyDecisionTimeoutMs).toBe(30_000);
    expect(params.networkProxy.proxy.reviewDomains).toEqual(['b.example']);
    expect(managedNetworkParams({ ask, askTimeoutMs: 1500 }, 'p', null).networkProxy).toMatchObject({
      policyDecisionTimeoutMs: 1500,
      proxy: { reviewDomains: [] },
    });
    // Without ask nothing opts in.
    const plain = managedNetworkParams({ allow: ['a.example'] }, 'p', null).networkProxy;
    expect('policyDecisionTimeoutMs' in plain || 'reviewDomains' in plain.proxy).toBe(false);
  });

  it('refuses a review list nobody answers, a bad review host and a timeout out of range', () => {
    expect(() => managedNetworkParams({ review: ['a.example'] }, 'p', null)).toThrow(
      'network.review: hosts under review need network.ask to answer for them',
    );
    const ask = () => 'deny' as const;
    expect(() => managedNetworkParams({ review: ['*'], ask }, 'p', null)).toThrow(/^network\.review: "\*"/);
    for (const bad of [0, -1, 1.5, 86_400_001, Number.NaN]) {
      expect(() => managedNetworkParams({ ask, askTimeoutMs: bad }, 'p', null)).toThrow(/^network\.askTimeoutMs: /);
    }
  });
});

describe('answerNetworkQuestion', () => {
  const question = { processId: 'p', request: { protocol: 'https_connect', host: 'x.example', port: 443 } };

  it('puts the question to the asker of the process it names, and answers as it says', async () => {
    const asked: NetworkQuestion[] = [];
    const answers = ['allow', 'deny', { deny: 'denied' }] as const;
    const results = [];
    for (const answer of answers) {
      results.push(
        await answerNetworkQuestion(question, (id) =>
          id === 'p'
            ? (q) => {
                asked.push(q);
                return answer;
              }
            : undefined,
        ),
      );
    }
    expect(asked).toEqual(Array(3).fill({ host: 'x.example', port: 443, protocol: 'https_connect' }));
    expect(results).toEqual([
      { decision: { type: 'allow' } },
      { decision: { type: 'deny' } },
      { decision: { type: 'deny', reason: 'denied' } },
    ]);
  });

  it('denies where nobody asks, where the asker throws or answers nonsense; refuses params that do not decode', async () => {
    const deny = { decision: { type: 'deny' } };
    expect(await answerNetworkQuestion(question, () => undefined)).toEqual(deny);
    expect(
      await answerNetworkQuestion(question, () => () => {
        throw new Error('no');
      }),
    ).toEqual(deny);
    expect(await answerNetworkQuestion(question, () => async () => Promise.reject(new Error('no')))).toEqual(deny);
    expect(await answerNetworkQuestion(question, () => () => 'yes' as never)).toEqual(deny);
    expect(await answerNetworkQuestion(question, () => () => ({ deny: 5 }) as never)).toEqual(deny);
    for (const bad of [null, {}, { processId: 'p' }, { ...question, request: { ...question.request, port: '443' } }]) {
      await expect(answerNetworkQuestion(bad, () => () => 'allow')).rejects.toThrow();
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

  it('network.ask answers the hosts the lists leave open, before the command reaches them', async () => {
    const env = Environment.remote(await ExecServerClient.connectWebSocket(peer.url!));
    try {
      const asked: NetworkQuestion[] = [];
      const decisions: NetworkDecision[] = [];
      const curl = (host: string) =>
        `curl -s -m 20 -o /dev/null -D - http://${host}/ | tr -d '\\r' | grep -i '^x-proxy-error'`;
      const script = [curl('denied-by-me.invalid'), curl('policy.invalid'), curl('allowed.invalid')].join('; ');
      const result = await env.exec(['bash', '-c', script], {
        network: {
          allow: ['allowed.invalid'],
          ask: (question) => {
            asked.push(question);
            return question.host === 'denied-by-me.invalid' ? { deny: 'denied' } : { deny: 'not on my list' };
          },
        },
        onNetworkDecision: (d) => decisions.push(d),
      });
      // The allowed host is not asked about (it fails later: an .invalid name does not resolve).
      expect(asked).toEqual([
        { host: 'denied-by-me.invalid', port: 80, protocol: 'http' },
        { host: 'policy.invalid', port: 80, protocol: 'http' },
      ]);
      expect(result.stdout.toString().split('\n').filter(Boolean)).toEqual([
        'x-proxy-error: blocked-by-denylist',
        'x-proxy-error: blocked-by-policy',
        // Allowed, not asked, then refused as a name that resolves to no public address.
        'x-proxy-error: blocked-by-allowlist',
      ]);
      expect(decisions).toMatchObject([
        { decision: 'deny', reason: 'denied', host: 'denied-by-me.invalid' },
        { decision: 'deny', reason: 'not on my list', host: 'policy.invalid' },
        { decision: 'deny', reason: 'not_allowed_local', host: 'allowed.invalid' },
      ]);
    } finally {
      await env.close();
    }
  });

  it('network.ask "allow" lets a host through (then resolved as any allowed host: an .invalid name does not)', async () => {
    const env = Environment.remote(await ExecServerClient.connectWebSocket(peer.url!));
    try {
      const decisions: NetworkDecision[] = [];
      const result = await env.exec(['bash', '-c', 'curl -s -m 20 -o /dev/null -w "%{http_code}" http://ok.invalid/'], {
        network: { ask: () => 'allow' },
        onNetworkDecision: (d) => decisions.push(d),
      });
      expect(result.stdout.toString()).toBe('403');
      expect(decisions).toMatchObject([{ host: 'ok.invalid', decision: 'deny', reason: 'not_allowed_local' }]);
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
