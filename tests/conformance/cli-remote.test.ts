// Remote-mode CLI behaviours of codex-rs/cli/tests/exec_server.rs, run against codex
// (`codex exec-server --remote`) and tether (`executor --remote`, Codex's spelling of its `--registry`) behind a
// test registry and relay. Both read the key from CODEX_API_KEY.
import { runPeer, startPeer, startTestRendezvous, waitUntil } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { closedAfterEach, expectStopOnStdinClose, KIND_CASES, startParentLifetime, useHarness } from './support.ts';

describe.each(KIND_CASES)('cli remote: %s', (_label, kind) => {
  const h = useHarness();
  /** The test registry and relay a test registers with. */
  const rig = closedAfterEach(startTestRendezvous);

  it('gracefully stops when its parent closes stdin, and children never see the switch', async () => {
    const { peer, client } = await startParentLifetime(h, kind, 'parent-lifetime');
    const running = await client.call<{ exited: boolean; closed: boolean }>('process/read', {
      processId: 'parent-lifetime',
      waitMs: 300,
    });
    expect(running).toMatchObject({ exited: false, closed: false });
    expect(peer.exitStatus()).toBeUndefined();
    await expectStopOnStdinClose(peer, client);
  });

  it('keeps running while stdin stays open', async () => {
    const peer = await h.startRemote(kind, { env: { CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE: 'true' } });
    const client = await h.connect(peer);
    await client.call('initialize', { clientName: 'still-here' });
    expect(peer.exitStatus()).toBeUndefined();
  });

  it('exits with a clear error when the registry refuses its API key', async () => {
    const registry = await rig();
    const run = await runPeer({
      kind,
      args: ['--remote', registry.registryUrl, '--environment-id', 'env-wrong-key'],
      env: { CODEX_API_KEY: 'not-the-key' },
      timeoutMs: 20_000,
    });
    expect(run.timedOut).toBe(false);
    expect(run.code).not.toBe(0);
    expect(run.stderr).toMatch(/401|unauthori[sz]ed|authentication/i);
    // The rejected token is not echoed back.
    expect(run.stderr).not.toContain('not-the-key');
  });

  it('--remote without --environment-id is a usage error', async () => {
    const registry = await rig();
    const run = await runPeer({
      kind,
      args: ['--remote', registry.registryUrl],
      env: { CODEX_API_KEY: registry.apiKey },
    });
    expect(run.timedOut).toBe(false);
    expect(run.code).not.toBe(0);
    expect(run.stderr).toContain('--environment-id');
  });

  if (kind === 'tether') {
    it('tether: --remote without an API key says where to put one', async () => {
      const registry = await rig();
      const run = await runPeer({
        kind,
        args: ['--remote', registry.registryUrl, '--environment-id', 'env-no-key'],
        env: { CODEX_API_KEY: '', TETHER_API_KEY: '', TETHER_EXECUTOR_API_KEY: '' },
      });
      expect(run.code).toBe(2);
      expect(run.stderr).toContain(
        '--registry needs an API key: --api-key-file PATH (mode 0600), --api-key-fd N, or TETHER_EXECUTOR_API_KEY (or CODEX_API_KEY)',
      );
    });

    it('tether: --registry and --remote are one flag, and Codex’s names draw no warning', async () => {
      const registry = await rig();
      for (const [flag, environmentId] of [
        ['--registry', 'env-registry-flag'],
        ['--remote', 'env-remote-flag'],
      ] as const) {
        const peer = await startPeer({
          kind,
          transport: 'remote',
          args: [flag, registry.registryUrl, '--environment-id', environmentId],
          env: { CODEX_API_KEY: registry.apiKey, CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE: 'true' },
        });
        try {
          await registry.environmentOnline(environmentId);
          expect(peer.stderr(), flag).not.toContain('warning');
        } finally {
          await peer.close();
        }
      }
    });

    it('tether: the deprecated TETHER_API_KEY still serves, with one warning across its re-exec', async () => {
      const registry = await rig();
      const peer = await startPeer({
        kind,
        transport: 'remote',
        args: ['--remote', registry.registryUrl, '--environment-id', 'env-old-key'],
        env: { TETHER_API_KEY: registry.apiKey, TETHER_LOG: 'info', CODEX_API_KEY: '' },
      });
      try {
        await registry.environmentOnline('env-old-key');
        await waitUntil(() => peer.stderr().includes('TETHER_LOG is deprecated'), 'the re-executed image’s warnings');
        const warnings = peer
          .stderr()
          .split('\n')
          .filter((line) => line.startsWith('executor: warning:'));
        expect(warnings).toEqual([
          'executor: warning: TETHER_API_KEY is deprecated; use TETHER_EXECUTOR_API_KEY (the harness reads it too, as its own)',
          'executor: warning: TETHER_LOG is deprecated; use TETHER_EXECUTOR_LOG_LEVEL',
        ]);
        expect(peer.stderr()).not.toContain(registry.apiKey);
      } finally {
        await peer.close();
      }
    });

    it('tether: SIGTERM while it keeps failing to reach the registry exits 0 at once', async () => {
      const peer = await startPeer({
        kind,
        transport: 'remote',
        args: ['--remote', 'http://127.0.0.1:1', '--environment-id', 'env-unreachable'],
        env: { TETHER_EXECUTOR_API_KEY: 'some-key' },
      });
      try {
        await waitUntil(() => peer.stderr().includes('registration failed; retrying'), 'a failed registration');
        peer.kill('SIGTERM');
        expect(await peer.exited).toEqual({ code: 0, signal: null });
      } finally {
        await peer.close();
      }
    });

    it('tether: an invalid environment id is refused before any request', async () => {
      const registry = await rig();
      const run = await runPeer({
        kind,
        args: ['--remote', registry.registryUrl, '--environment-id', 'bad/id'],
        env: { TETHER_EXECUTOR_API_KEY: registry.apiKey },
      });
      expect(run.code).not.toBe(0);
      expect(run.stderr).toContain('invalid environment id');
    });
  }
});
