/**
 * Sandbox profiles for `spawn({sandbox})`, built as Codex's agent builds them (CODEX-FINDINGS.md §21), so a
 * person gets the protection an agent gets: `read-only` (the disk readable, nothing writable, no network) and
 * `workspace-write` (also the workspace, `/tmp`, `$TMPDIR` and any `writable` directory writable, with `.git`,
 * `.agents`, `.codex` and `.aws` in them kept read-only). The executor must advertise `processSandbox`.
 */
import { pathToFileUri } from '@tether/exec-protocol';

export type SandboxMode = 'read-only' | 'workspace-write';

export interface SandboxProfileOptions {
  /** The workspace (absolute, on the environment); workspace-write makes it writable. */
  workspace: string;
  /** More directories to make writable (workspace-write). */
  writable?: string[];
  /** Let the process use the network (default: no network). */
  network?: boolean;
}

const special = (kind: string, subpath?: string) => ({
  type: 'special',
  value: subpath === undefined ? { kind } : { kind, subpath },
});

/** The wire `sandbox` value for a mode. */
export function sandboxProfile(mode: SandboxMode, options: SandboxProfileOptions): Record<string, unknown> {
  for (const dir of [options.workspace, ...(options.writable ?? [])]) {
    if (!dir.startsWith('/')) throw new Error(`sandbox directories must be absolute: ${dir}`);
  }
  const entries: unknown[] = [{ path: special('root'), access: 'read' }];
  if (mode === 'workspace-write') {
    entries.push(
      { path: special('project_roots'), access: 'write' },
      { path: special('slash_tmp'), access: 'write' },
      { path: special('tmpdir'), access: 'write' },
      ...(options.writable ?? []).map((dir) => ({ path: { type: 'path', path: pathToFileUri(dir) }, access: 'write' })),
      ...['.git', '.agents', '.codex'].map((name) => ({
        path: special('project_roots', name),
        access: 'read',
        missing_path_behavior: 'skip',
      })),
    );
  }
  return {
    permissions: {
      type: 'managed',
      file_system: { type: 'restricted', entries },
      network: options.network === true ? 'enabled' : 'restricted',
    },
    cwd: pathToFileUri(options.workspace),
    workspaceRoots: [pathToFileUri(options.workspace)],
    windowsSandboxLevel: 'disabled',
    useLegacyLandlock: false,
  };
}
