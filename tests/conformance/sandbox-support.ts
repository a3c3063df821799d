// What the sandbox conformance files share: the profiles Codex's agent sends, the sandbox context around one,
// and a scratch area outside /tmp with a fresh workspace per scenario and a way to run a command there.

import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { codexSandboxPath, collectUntilClosed, fileUri, type TestClient } from '@tether/test-kit';
import { afterAll } from 'vitest';

const special = (kind: string, extra: Record<string, unknown> = {}) => ({
  type: 'special',
  value: { kind, ...extra },
});

/** What Codex's agent sends for `-s workspace-write` (network as given). */
export function workspaceWrite(network: 'restricted' | 'enabled') {
  return {
    type: 'managed',
    file_system: {
      type: 'restricted',
      entries: [
        { path: special('root'), access: 'read' },
        { path: special('project_roots'), access: 'write' },
        { path: special('slash_tmp'), access: 'write' },
        { path: special('tmpdir'), access: 'write' },
        ...['.git', '.agents', '.codex'].map((subpath) => ({
          path: special('project_roots', { subpath }),
          access: 'read',
          missing_path_behavior: 'skip',
        })),
      ],
    },
    network,
  };
}

/** What Codex's agent sends for `-s read-only`. */
export const READ_ONLY = {
  type: 'managed',
  file_system: { type: 'restricted', entries: [{ path: special('root'), access: 'read' }] },
  network: 'restricted',
};

/** workspace-write (network restricted) plus a deny of what the `glob_pattern` `pattern` matches. */
export function workspaceWriteDenying(pattern: string) {
  const profile = workspaceWrite('restricted');
  profile.file_system.entries.push({ path: { type: 'glob_pattern', pattern }, access: 'deny' } as never);
  return profile;
}

/** The sandbox context of a request: `permissions` for the workspace `root`, as Codex's agent sends it. */
export const sandboxAt = (root: string, permissions: unknown) => ({
  permissions,
  cwd: fileUri(root),
  workspaceRoots: [fileUri(root)],
  windowsSandboxLevel: 'disabled',
});

/** Codex's workspace-write context for the workspace `root`. */
export const workspaceWriteAt = (root: string) => sandboxAt(root, workspaceWrite('restricted'));

/**
 * Per-file scratch area outside /tmp (which workspace-write makes writable), removed after the file: fresh
 * workspaces for one scenario each, and commands run in them under a sandbox.
 */
export function useSandboxScratch() {
  const scratch = mkdtempSync('/var/tmp/tether-sandbox-');
  // Codex's exec-server finds its helper (the codex-linux-sandbox alias) on the command's PATH.
  const path = codexSandboxPath(scratch).replace(/:.*$/, '');
  afterAll(() => {
    rmSync(scratch, { recursive: true, force: true });
  });

  /** A fresh workspace (with a .git), a directory outside it, and a TMPDIR, for one peer kind. */
  function layout(kind: string) {
    const base = join(scratch, `${kind}-${Math.random().toString(36).slice(2, 8)}`);
    const root = join(base, 'workspace');
    const outside = join(base, 'outside');
    const tmp = join(base, 'tmpdir');
    for (const dir of [root, join(root, '.git'), outside, tmp]) mkdirSync(dir, { recursive: true });
    writeFileSync(join(outside, 'secret'), 'top secret\n');
    mkdirSync(join(root, 'sub'));
    writeFileSync(join(root, 'sub', 'secret-key'), 'workspace secret\n');
    symlinkSync(outside, join(root, 'link-out'));
    return { base, root, outside, tmp };
  }

  /** `process/start` params for `argv` in `cwd`, under `sandbox` (null: none). */
  const startParams = (
    processId: string,
    argv: string[],
    cwd: string,
    sandbox: unknown,
    env: Record<string, string> = {},
  ) => ({
    processId,
    argv,
    cwd: fileUri(cwd),
    env: { PATH: `${path}:/usr/bin:/bin`, ...env },
    tty: false,
    pipeStdin: false,
    arg0: null,
    ...(sandbox === null ? {} : { sandbox }),
  });

  /** Runs the bash `script` to its end: how it started, its exit, sandboxDenied and all it printed. */
  async function run(
    client: TestClient,
    id: string,
    script: string,
    cwd: string,
    env: Record<string, string>,
    sandbox: unknown,
  ) {
    const started = await client.request(
      'process/start',
      startParams(id, ['/bin/bash', '-c', script], cwd, sandbox, env),
    );
    if (started.error) return { startError: started.error };
    const sandboxType = (started.result as { sandboxType?: string }).sandboxType;
    const collected = await collectUntilClosed(client, id);
    const read = (await client.call('process/read', { processId: id, afterSeq: 0, maxBytes: 1 })) as {
      sandboxDenied: boolean;
    };
    return {
      sandboxType,
      exitCode: collected.exitCode,
      sandboxDenied: read.sandboxDenied,
      output: collected.output + collected.stderr,
    };
  }

  return { layout, startParams, run, path };
}
