import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { findProcesses, type PeerKind, repoRoot, runToEndBytes, type Stack, startStack } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

interface Outcome {
  code: number | null;
  stdout: Buffer;
  stderr: string;
}

// Outside /tmp, which workspace-write makes writable.
const work = mkdtempSync('/var/tmp/tether-harness-sandbox-');
let stack: Stack;
let listener: Server;
let port = 0;

async function harness(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Outcome> {
  const { code, stdout, stderr } = await runToEndBytes(
    process.execPath,
    [join(repoRoot(), 'apps', 'harness', 'dist', 'main.js'), ...args],
    {
      env: { ...process.env, TETHER_CONFIG: join(work, 'no-config.toml'), ...env },
    },
  );
  return { code, stdout, stderr };
}

beforeAll(async () => {
  listener = createServer((socket) => {
    socket.on('error', () => undefined);
    socket.end();
  });
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
  port = (listener.address() as { port: number }).port;
  stack = await startStack();
  await stack.startExecutor('tether', 'sandbox-tether');
  await stack.startExecutor('codex', 'sandbox-codex');
}, 120_000);

afterAll(async () => {
  await stack?.close();
  await new Promise((resolve) => listener?.close(resolve));
  expect(findProcesses({ cwdUnder: work })).toEqual([]);
  rmSync(work, { recursive: true, force: true });
});

describe.each(['tether', 'codex'] as PeerKind[])('harness exec --sandbox → %s executor', (kind) => {
  const env = () => ({
    TETHER_HARNESS_REGISTRY: stack.registryUrl,
    TETHER_HARNESS_ENVIRONMENT_ID: `sandbox-${kind}`,
    TETHER_HARNESS_API_KEY: stack.keys.harness,
  });

  it('workspace-write: the workspace and /tmp take writes, .git (nested too, on ours) and everything else do not, no network', async () => {
    const workspace = join(work, `${kind}-workspace`);
    const outside = join(work, `${kind}-outside`);
    mkdirSync(join(workspace, '.git'), { recursive: true });
    mkdirSync(join(workspace, 'vendor', 'lib', '.git', 'hooks'), { recursive: true });
    mkdirSync(outside, { recursive: true });
    const script = [
      'touch inside && echo inside-ok',
      't=$(mktemp /tmp/tether-sbx-XXXXXX) && rm "$t" && echo tmp-ok',
      `touch ${outside}/x`,
      'touch .git/hooks-x',
      'touch vendor/lib/.git/hooks/pre-commit && echo nested-hook-written',
      `exec 3<>/dev/tcp/127.0.0.1/${port} && echo net-ok`,
    ].join('; ');
    const run = await harness(
      [
        'exec',
        '--sandbox',
        'workspace-write',
        '--cwd',
        workspace,
        '--',
        '/bin/bash',
        '-c',
        `exec 2>&1; ${script}; exit 0`,
      ],
      env(),
    );
    const out = run.stdout.toString();
    expect(run.code, run.stderr).toBe(0);
    expect(out).toContain('inside-ok');
    expect(out).toContain('tmp-ok');
    expect(out).toContain(`touch: cannot touch '${outside}/x': Read-only file system`);
    expect(out).toContain("touch: cannot touch '.git/hooks-x': Read-only file system");
    // A nested repository's hooks: read-only on ours; Codex 0.171.0 protects only the top-level .git.
    if (kind === 'tether') {
      expect(out).toContain("touch: cannot touch 'vendor/lib/.git/hooks/pre-commit': Read-only file system");
      expect(existsSync(join(workspace, 'vendor', 'lib', '.git', 'hooks', 'pre-commit'))).toBe(false);
    } else {
      expect(out).toContain('nested-hook-written');
    }
    expect(out).toContain('socket: Operation not permitted');
    expect(out).not.toContain('net-ok');
    expect(readdirSync(outside)).toEqual([]);
    expect(existsSync(join(workspace, 'inside'))).toBe(true);
  });

  it('--network lets it connect; read-only takes no write at all; a failing command keeps its code', async () => {
    const workspace = join(work, `${kind}-ro`);
    mkdirSync(workspace, { recursive: true });
    const net = await harness(
      [
        'exec',
        '--sandbox',
        'workspace-write',
        '--network',
        '--cwd',
        workspace,
        '--',
        '/bin/bash',
        '-c',
        `exec 3<>/dev/tcp/127.0.0.1/${port} && echo net-ok`,
      ],
      env(),
    );
    expect(net.stdout.toString(), net.stderr).toContain('net-ok');
    const ro = await harness(['exec', '--sandbox', 'read-only', '--cwd', workspace, '--', 'touch', 'x'], env());
    expect(ro.code).toBe(1);
    expect(ro.stderr).toContain('Read-only file system');
    expect(readdirSync(workspace)).toEqual([]);
  });

  it('streams large output whole from inside the sandbox', async () => {
    const workspace = join(work, `${kind}-big`);
    mkdirSync(workspace, { recursive: true });
    const bytes = 32 * 1024 * 1024;
    const run = await harness(
      [
        'exec',
        '--sandbox',
        'read-only',
        '--cwd',
        workspace,
        '--',
        '/bin/sh',
        '-c',
        `head -c ${bytes} /dev/zero | tr '\\0' x`,
      ],
      env(),
    );
    if (kind === 'codex' && run.code !== 0) {
      // Codex's executor has no flow control: past its 1 MiB of retention a slower reader loses output, which
      // the harness says (spec §4.2); never a short output passed off as whole.
      expect(run.code).toBe(255);
      expect(run.stderr).toMatch(/no longer retained by the executor/);
      return;
    }
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout.length).toBe(bytes);
    expect(createHash('sha256').update(run.stdout).digest('hex')).toBe(
      createHash('sha256').update(Buffer.alloc(bytes, 'x')).digest('hex'),
    );
  });
});

describe('harness exec --sandbox: usage', () => {
  it('bad flags are usage errors (exit 2) before anything connects', async () => {
    // No registry is configured: a connect would fail with 255, not 2.
    const cases: Array<[string[], RegExp]> = [
      [['--sandbox', 'workspace-write'], /needs --cwd/],
      [['--writable', '/x'], /go with --sandbox/],
      [['--network'], /go with --sandbox/],
      [['--sandbox', 'read-only', '--cwd', '/', '--writable', '/x'], /goes with --sandbox workspace-write/],
      [['--sandbox', 'workspace-write', '--cwd', '/', '--writable', 'rel'], /absolute/],
      [['--sandbox', 'nope'], /Allowed choices are read-only, workspace-write/],
      [['--sandbox', 'read-only', '-d'], /does not go with --detach/],
    ];
    for (const [flags, message] of cases) {
      const run = await harness(['exec', ...flags, '--', 'true'], {
        TETHER_HARNESS_REGISTRY: '',
        TETHER_HARNESS_API_KEY: '',
      });
      expect(run.code, flags.join(' ')).toBe(2);
      expect(run.stderr, flags.join(' ')).toMatch(message);
    }
  });
});
