/**
 * bubblewrap's arguments for a policy. The layers, and what each stops:
 *
 * - a mount namespace built from the policy: the whole disk read-only (`--ro-bind / /`) or, when reads are
 *   restricted, an empty root with only the readable entries bound in; writable roots bound writable over
 *   that; read-only entries, `.git`/`.agents`/`.codex`/`.aws` (at the top of each writable root and nested
 *   below it) and denied paths mounted over those, deepest last. A
 *   write outside the writable roots fails with EROFS whatever path reaches it (a symlink, `/proc/self/root`,
 *   `..`): the check is the kernel's, on the mount, not a prefix test on a path;
 * - a user namespace with every capability dropped (`--cap-drop ALL`): no mount, no chroot, no raw sockets,
 *   root inside cannot bypass file permissions (a denied path is mode 000);
 * - a PID namespace (`--unshare-pid`) whose init is bubblewrap's: every child, double-forked or setsid, dies
 *   with it, and bubblewrap dies with its parent (`--die-with-parent`), the executor's child;
 * - an IPC namespace, and with the network restricted, or managed (`unshareNet`: a proxy reached through a
 *   relay inside, the only way out), a network namespace (only a loopback of its own);
 * - the seccomp filter (seccomp.ts), given as `--seccomp 3`.
 *
 * No `--new-session`: a pipe child has no controlling terminal (the executor starts it in a session of its
 * own), and a PTY child's terminal is its own, so TIOCSTI could only type into itself; keeping the session
 * lets Ctrl-C and job control work in a sandboxed shell.
 */
import { existsSync, lstatSync, readdirSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import { depth, type SandboxPolicy } from './policy.js';

/** Files the arguments refer to, owned by the Sandboxer (sandboxer.ts). */
export interface MountSources {
  /** An empty directory of mode 000 (a denied directory shows as this). */
  deniedDirectory: string;
  /** An empty file of mode 000 (a denied file shows as this). */
  deniedFile: string;
  /** An empty directory of mode 555 (a missing protected name shows as this). */
  emptyReadOnlyDirectory: string;
}

export interface BwrapPlan {
  args: string[];
  /**
   * Paths bubblewrap creates on the host as mount points (a missing `.git` inside a writable root, a missing
   * denied path): the caller removes them once the sandbox is gone, if they are still empty.
   */
  syntheticTargets: string[];
  /**
   * Protected names found as empty directories and covered as if missing: one may be a mount point another sandbox
   * of this executor made (its caller then counts this sandbox among its users, so that it stays while in use).
   */
  emptyTargets: string[];
}

export interface BwrapOptions {
  cwd: string;
  /** The fd bubblewrap reads the seccomp program from, or null for none. */
  seccompFd: number | null;
  /** More paths to make readable (the fs helper's runtime when reads are restricted). */
  extraReadable?: string[];
  /** A network namespace of its own whatever the profile's network (the managed proxy's enforcement). */
  unshareNet?: boolean;
}

function kind(path: string): 'directory' | 'file' | 'missing' {
  try {
    return statSync(path).isDirectory() ? 'directory' : 'file';
  } catch {
    try {
      lstatSync(path);
      return 'file'; // a dangling link: masked as a file
    } catch {
      return 'missing';
    }
  }
}

/** Whether `path` is a directory with nothing in it (false when it cannot be read). */
function isEmptyDirectory(path: string): boolean {
  try {
    return readdirSync(path).length === 0;
  } catch {
    return false;
  }
}

function within(path: string, roots: string[]): boolean {
  return roots.some((root) => path === root || path.startsWith(root === '/' ? '/' : `${root}/`));
}

export function bwrapArgs(policy: SandboxPolicy, sources: MountSources, options: BwrapOptions): BwrapPlan {
  const args = ['--die-with-parent', '--unshare-user', '--unshare-pid', '--unshare-ipc'];
  if (policy.network === 'restricted' || options.unshareNet === true) args.push('--unshare-net');
  const syntheticTargets: string[] = [];
  const emptyTargets: string[] = [];
  if (!policy.restrictsFileSystem) {
    // The filesystem as it is (writable where the host's is), in namespaces of its own.
    args.push('--bind', '/', '/', '--dev-bind', '/dev', '/dev', '--proc', '/proc');
  } else {
    if (policy.fullRead) args.push('--ro-bind', '/', '/');
    else args.push('--tmpfs', '/');
    args.push('--dev', '/dev', '--proc', '/proc');
    if (!policy.fullRead) for (const path of options.extraReadable ?? []) args.push('--ro-bind-try', path, path);
    type Mount = { path: string; apply: () => void };
    const mounts: Mount[] = [];
    const explicit = new Map(policy.entries.map((e) => [e.path, e]));
    const readable = policy.entries.filter((e) => e.access !== 'deny').map((e) => e.path);
    for (const entry of policy.entries) {
      const { path } = entry;
      if (entry.access === 'write') {
        mounts.push({ path, apply: () => args.push('--bind-try', path, path) });
      } else if (entry.access === 'read') {
        // Under the read-only root a read entry changes nothing unless a writable root holds it.
        if (path === '/' && policy.fullRead) continue;
        if (policy.protectedPaths.includes(path)) continue;
        mounts.push({ path, apply: () => args.push('--ro-bind-try', path, path) });
      } else {
        const found = kind(path);
        if (found === 'missing') {
          // Nothing to hide; inside a writable root it must not be created either.
          if (entry.skipMissing || !within(dirname(path), policy.writable) || !existsSync(dirname(path))) continue;
          mounts.push({
            path,
            apply: () => {
              args.push('--ro-bind', sources.deniedFile, path);
              syntheticTargets.push(path);
            },
          });
          continue;
        }
        if (!within(path, readable) && !policy.fullRead) continue;
        const source = found === 'directory' ? sources.deniedDirectory : sources.deniedFile;
        mounts.push({ path, apply: () => args.push('--ro-bind', source, path) });
      }
    }
    const nested = new Set(policy.nestedProtectedPaths);
    for (const path of policy.protectedPaths) {
      // Only an explicit write opens a protected name; a read of it (Codex's `.git` entries) is this.
      if (explicit.get(path)?.access === 'write') continue;
      const found = kind(path);
      if (nested.has(path)) {
        // Found by the walk: gone by the time bubblewrap starts, it has nothing left to keep.
        mounts.push({ path, apply: () => args.push('--ro-bind-try', path, path) });
      } else if (found === 'directory' && isEmptyDirectory(path)) {
        // Empty, so it shows as our own empty directory, which is always there: it may be another sandbox's mount
        // point (the host's /tmp is every sandbox's), which that sandbox removes when it ends, maybe before
        // bubblewrap starts here ("Can't find source path" would fail the launch). Not ours to remove after.
        mounts.push({
          path,
          apply: () => {
            args.push('--ro-bind', sources.emptyReadOnlyDirectory, path);
            emptyTargets.push(path);
          },
        });
      } else if (found !== 'missing') {
        mounts.push({ path, apply: () => args.push('--ro-bind', path, path) });
      } else if (existsSync(dirname(path))) {
        mounts.push({
          path,
          apply: () => {
            args.push('--ro-bind', sources.emptyReadOnlyDirectory, path);
            syntheticTargets.push(path);
          },
        });
      }
    }
    // Shallowest first, so each mount lands over the ones that hold it (a stable sort keeps entries first).
    mounts.sort((a, b) => depth(a.path) - depth(b.path));
    for (const mount of mounts) mount.apply();
    // A writable `/` (an approved escalation that keeps the profile's denials) is bound over the fresh /dev
    // and /proc, and devices on a bind in a user namespace do not open (/dev/null: Permission denied). They go
    // back on top, as Codex keeps them (its `linuxRootWritePreservesDevices`).
    if (explicit.get('/')?.access === 'write') args.push('--dev', '/dev', '--proc', '/proc');
  }
  args.push('--cap-drop', 'ALL', '--chdir', options.cwd);
  if (options.seccompFd !== null) args.push('--seccomp', String(options.seccompFd));
  return { args, syntheticTargets, emptyTargets };
}
