/**
 * Security promises held through the real registry, relay, `executor --remote` and harness processes
 * (SECURITY.md points here): revocation ends a live session and `/connect` says why; a newer registration of
 * an environment keeps it (the older executor stops instead of taking it back); a child that escapes its
 * process group with setsid still dies with the executor; an authorization dies with the harness key that minted it.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Environment } from '@tether/client';
import { generateIdentity, publicKeyToJson } from '@tether/noise';
import { repoRoot, type Stack, startStack, waitUntil } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const HARNESS = join(repoRoot(), 'apps/harness/bin/harness.js');

let stack: Stack;

beforeAll(async () => {
  stack = await startStack();
}, 60_000);

afterAll(async () => {
  await stack?.close();
});

/** The harness CLI against the stack: exit code, stdout and stderr. */
async function harness(environmentId: string, args: string[]) {
  const child = spawn(process.execPath, [HARNESS, ...args], {
    env: {
      ...process.env,
      TETHER_HARNESS_REGISTRY: stack.registryUrl,
      TETHER_HARNESS_API_KEY: stack.keys.harness,
      TETHER_HARNESS_ENVIRONMENT_ID: environmentId,
      TETHER_HARNESS_CONNECT_TIMEOUT: '10',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => {
    stdout += d;
  });
  child.stderr.on('data', (d: Buffer) => {
    stderr += d;
  });
  const [code] = (await once(child, 'exit')) as [number | null];
  return { code, stdout, stderr };
}

function connect(environmentId: string, onStatus?: (status: string, detail: string) => void) {
  return Environment.connectRendezvous({
    registryUrl: stack.registryUrl,
    apiKey: stack.keys.harness,
    environmentId,
    clientName: 'tether-security-e2e',
    ...(onStatus ? { onStatus } : {}),
  });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The parent pid of `pid` from /proc, or null once it is gone. */
function parentOf(pid: number): number | null {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    return Number(/^PPid:\s+(\d+)/m.exec(status)?.[1]);
  } catch {
    return null;
  }
}

describe('security through the real stack', () => {
  it('a newer registration keeps the environment: the older executor stops instead of taking it back', {
    timeout: 60_000,
  }, async () => {
    const environmentId = 'env-sec-epoch';
    const first = await stack.startExecutor('tether', environmentId, { env: { TETHER_SEC_MARK: 'first' } });
    const before = await harness(environmentId, ['exec', '--', 'sh', '-c', 'echo $TETHER_SEC_MARK']);
    expect(before, before.stderr).toMatchObject({ code: 0, stdout: 'first\n' });

    const second = await stack.startExecutor('tether', environmentId, { env: { TETHER_SEC_MARK: 'second' } });
    // The relay gave the environment to the newer registration and refuses the older one's URL from now
    // on; the older executor gives up rather than register again (which would take the environment back).
    const exit = await first.exited;
    expect(exit, first.stderr()).toEqual({ code: 1, signal: null });
    expect(first.stderr()).toMatch(/another executor registered this environment/);
    expect(second.exitStatus()).toBeUndefined();
    for (let i = 0; i < 3; i++) {
      const after = await harness(environmentId, ['exec', '--', 'sh', '-c', 'echo $TETHER_SEC_MARK']);
      expect(after, after.stderr).toMatchObject({ code: 0, stdout: 'second\n' });
    }
    await second.close();
  });

  it('a child that leaves its group with setsid dies with the executor (a subreaper adopted it)', {
    timeout: 60_000,
  }, async () => {
    const environmentId = 'env-sec-setsid';
    const executor = await stack.startExecutor('tether', environmentId);
    // The shell starts a sleeper in a session of its own and exits: the sleeper is an orphan at once.
    const started = await harness(environmentId, [
      'exec',
      '--',
      'sh',
      '-c',
      'setsid sleep 1000 >/dev/null 2>&1 & echo $!',
    ]);
    expect(started.code, started.stderr).toBe(0);
    const sleeper = Number(started.stdout.trim());
    expect(sleeper).toBeGreaterThan(1);
    try {
      // Without a subreaper the orphan would go to init (or to the nearest subreaper above us).
      await waitUntil(() => parentOf(sleeper) === executor.pid, 'the executor to adopt the setsid sleeper', 10_000);
      expect((await executor.close()).code).toBe(0);
      await waitUntil(() => !alive(sleeper), 'the setsid sleeper to die with the executor', 10_000);
    } finally {
      if (alive(sleeper)) process.kill(sleeper, 'SIGKILL');
    }
  });

  // Last: it revokes the executor key every executor of this stack shares.
  it('revoking the executor key ends its live sessions at once and /connect says the registration was revoked', {
    timeout: 60_000,
  }, async () => {
    const environmentId = 'env-sec-revoke';
    const executor = await stack.startExecutor('tether', environmentId);
    const statuses: string[] = [];
    const env = await connect(environmentId, (status, detail) => statuses.push(`${status}: ${detail}`));
    try {
      await env.spawn(['sleep', '1000']);
      const admin = { authorization: `Bearer ${stack.keys.admin}` };
      const listed = (await (await fetch(`${stack.registryUrl}/v1/environments`, { headers: admin })).json()) as {
        environments: Array<{ environment_id: string; owner_key_id: string | null }>;
      };
      const owner = listed.environments.find((e) => e.environment_id === environmentId)?.owner_key_id;
      expect(owner).toBeTruthy();
      const revoked = await fetch(`${stack.registryUrl}/v1/keys/${owner}`, { method: 'DELETE', headers: admin });
      expect(revoked.status).toBe(200);

      // The relay closes the registration's sockets when the registry's push arrives: the session drops.
      await waitUntil(() => statuses.some((s) => s.startsWith('disconnected')), 'the session to drop', 10_000);
      // Resuming asks the registry for a bundle, which says revoked: the session is given up at once, not
      // retried until the resume deadline (25 s).
      await waitUntil(
        () => statuses.some((s) => s.startsWith('lost') && /revoked/.test(s)),
        'the session to be given up as revoked',
        10_000,
      );
      await waitUntil(
        async () => !(await stack.relayMetrics()).match(/^relay_sockets\{role="environment"\} [1-9]/m),
        'the relay to hold no environment socket',
        10_000,
      );
      // The executor learns it when it registers again, and exits instead of retrying forever.
      expect((await executor.exited).code).toBe(1);
      // A new connect is refused by the registry itself, with the reason, not by a failed handshake later.
      const after = await harness(environmentId, ['exec', '--', 'true']);
      expect(after.code).not.toBe(0);
      expect(after.stderr).toMatch(/revoked/);
      expect(after.stderr).not.toContain(stack.keys.harness);
    } finally {
      await env.close().catch(() => undefined);
    }
  });
  it('a harness key revoked after /connect: the executor key’s /validate of its authorization says invalid', {
    timeout: 60_000,
  }, async () => {
    const environmentId = 'env-sec-harness-revoke';
    // Its own executor key: the test above revokes the stack's.
    const executorKey = await stack.createKey('executor', environmentId);
    const executor = await stack.startExecutor('tether', environmentId, {
      env: { CODEX_API_KEY: executorKey, TETHER_EXECUTOR_API_KEY: executorKey },
    });
    try {
      const harnessKey = publicKeyToJson(generateIdentity().publicKey);
      const post = async (path: string, key: string, body: object) =>
        fetch(`${stack.registryUrl}/cloud/environment/${environmentId}/${path}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
      const bundle = async (key: string) => {
        const res = await post('connect', key, { harness_public_key: harnessKey });
        expect(res.status).toBe(200);
        return (await res.json()) as { executor_registration_id: string; harness_key_authorization: string };
      };
      const validate = async (b: Awaited<ReturnType<typeof bundle>>) =>
        (await post('validate', executorKey, {
          executor_registration_id: b.executor_registration_id,
          harness_public_key: harnessKey,
          harness_key_authorization: b.harness_key_authorization,
        }).then((r) => r.json())) as { valid: boolean };
      const doomed = await stack.createKey('harness', '*');
      const doomedBundle = await bundle(doomed);
      const keptBundle = await bundle(stack.keys.harness);
      // `registry keys create` names a key key_ + the first 16 hex digits of its token's SHA-256.
      const id = `key_${createHash('sha256').update(doomed).digest('hex').slice(0, 16)}`;
      const revoked = await fetch(`${stack.registryUrl}/v1/keys/${id}`, {
        method: 'DELETE',
        headers: { authorization: `Bearer ${stack.keys.admin}` },
      });
      expect(revoked.status).toBe(200);
      expect(await validate(doomedBundle)).toEqual({ valid: false });
      expect(await validate(keptBundle)).toEqual({ valid: true });
    } finally {
      await executor.close();
    }
  });
});
