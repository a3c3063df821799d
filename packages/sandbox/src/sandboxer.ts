/**
 * The executor's sandbox: finds bubblewrap, checks once that it can build the namespaces here, owns the
 * files its arguments refer to (the seccomp programs, the empty mount sources, in a private 0700
 * directory), and turns a request's `sandbox` into the command that runs it confined. One per executor;
 * `close()` removes its directory.
 */
import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  constants,
  mkdirSync,
  mkdtempSync,
  openSync,
  rmdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileUriToPath, type SandboxContext } from '@tether/exec-protocol';
import { type BwrapPlan, bwrapArgs, type MountSources } from './bwrap.js';
import { IN_THREAD_WALKER, resolvePolicy, type SandboxPolicy, WalkUnavailableError } from './policy.js';
import { findProgram } from './programs.js';
import { type SeccompMode, seccompProgram, seccompSupported } from './seccomp.js';
import { probeTransparentTcp, type TransparentTcpStatus } from './transparent-tcp.js';
import { WalkThread } from './walk-thread.js';

/** What this executor can enforce (advertised in `environment/info` and `executor --help`). */
export interface SandboxStatus {
  /** Whether a restricting profile can be enforced here. */
  available: boolean;
  /** Why not, and what to do, when it cannot. */
  reason: string | null;
  /** The bubblewrap binary in use. */
  bwrap: string | null;
  /** Whether the seccomp layer is applied (x86_64 and aarch64). */
  seccomp: boolean;
}

/** A restricting profile on a host that cannot sandbox: refused, never run unconfined. */
export class SandboxUnavailableError extends Error {
  override readonly name = 'SandboxUnavailableError';
}

/** How to run one process (or fs helper) under a profile. */
export interface PreparedSandbox {
  policy: SandboxPolicy;
  /**
   * The program and arguments that come before the command (bubblewrap's, ending in `--`), or null when
   * the profile restricts nothing this host would enforce (network on, filesystem unrestricted).
   */
  prefix: { file: string; args: string[] } | null;
  /** A file to open read-only as the child's fd 3 (bubblewrap reads the seccomp program from it). */
  seccompFile: string | null;
  /** Call once the process has exited: removes the mount points bubblewrap made on the host. */
  release(): void;
}

export interface PrepareOptions {
  /** The process's working directory (bubblewrap changes to it inside). */
  cwd: string;
  /** The TMPDIR `tmpdir` means (the process's own; the executor's for fs calls). */
  tmpdir?: string | undefined;
  /** Restrict the network whatever the profile says (the fs helper never needs it). */
  forceNetworkRestricted?: boolean;
  /** More paths to keep readable when reads are restricted. */
  extraReadable?: string[];
  /**
   * Codex's managed network enforcement: the command gets a network namespace of its own (only a loopback)
   * whatever the profile's network, and `relay` (argv) runs first, as bubblewrap's command, with the command's
   * after it; the relay gets its upstream connections over descriptors it inherits, never by a socket it makes.
   * The seccomp filter is the `proxied` one: AF_INET and AF_INET6 sockets (the namespace's loopback) but no
   * AF_UNIX socket, so nothing reaches a host's unix socket that the mounts show, as under Codex.
   */
  managedNetwork?: { relay: string[] } | null;
}

/** The sandbox's own cwd (a file URI in the context), when it has one that is valid here. */
function sandboxCwd(context: SandboxContext): string | null {
  if (context.cwd === null) return null;
  try {
    return fileUriToPath(context.cwd);
  } catch {
    return null;
  }
}

export class Sandboxer {
  readonly status: SandboxStatus;
  /** Whether a sandbox's TCP can be routed through its relay here (transparent-tcp.ts), and if not why. */
  readonly transparentTcp: TransparentTcpStatus;
  private readonly dir: string | null;
  private readonly sources: MountSources;
  private readonly seccompFiles: Record<SeccompMode, string> | null;
  /** Synthetic mount points in use, with how many sandboxes use each. */
  private readonly synthetic = new Map<string, number>();
  /**
   * Where the policies' walks of the disk run: a thread of their own, off the event loop. One that cannot sandbox
   * refuses every profile the walks matter to, so it walks on the calling thread and starts no thread (a connection
   * served without a sandbox has one of these of its own).
   */
  private readonly walkThread: WalkThread | null;
  private closed = false;

  private constructor(
    dir: string | null,
    sources: MountSources,
    seccompFiles: Sandboxer['seccompFiles'],
    status: SandboxStatus,
    transparentTcp: TransparentTcpStatus = probeTransparentTcp(status.reason),
  ) {
    this.transparentTcp = transparentTcp;
    this.dir = dir;
    this.sources = sources;
    this.seccompFiles = seccompFiles;
    this.status = status;
    this.walkThread = status.available ? new WalkThread() : null;
  }

  /** A sandbox that enforces nothing: every restricting profile is refused with `reason`. */
  static none(reason: string): Sandboxer {
    const nowhere: MountSources = { deniedDirectory: '', deniedFile: '', emptyReadOnlyDirectory: '' };
    return new Sandboxer(
      null,
      nowhere,
      null,
      { available: false, reason, bwrap: null, seccomp: false },
      { available: false, reason: `the sandbox is unavailable: ${reason}`, tools: null },
    );
  }

  /** Finds bubblewrap (`bwrap` on PATH, or `bwrapPath`) and checks it works here (one run, a few ms). */
  static open(options: { bwrapPath?: string | null } = {}): Sandboxer {
    const dir = mkdtempSync(join(tmpdir(), 'tether-sandbox-'));
    chmodSync(dir, 0o700);
    const sources: MountSources = {
      deniedDirectory: join(dir, 'denied-directory'),
      deniedFile: join(dir, 'denied-file'),
      emptyReadOnlyDirectory: join(dir, 'empty-directory'),
    };
    mkdirSync(sources.deniedDirectory, { mode: 0o000 });
    chmodSync(sources.deniedDirectory, 0o000);
    writeFileSync(sources.deniedFile, '', { mode: 0o000 });
    chmodSync(sources.deniedFile, 0o000);
    mkdirSync(sources.emptyReadOnlyDirectory);
    chmodSync(sources.emptyReadOnlyDirectory, 0o555);
    let seccompFiles: Sandboxer['seccompFiles'] = null;
    if (seccompSupported()) {
      const files: Record<SeccompMode, string> = {
        restricted: join(dir, 'seccomp-restricted.bpf'),
        enabled: join(dir, 'seccomp-enabled.bpf'),
        proxied: join(dir, 'seccomp-proxied.bpf'),
      };
      for (const mode of Object.keys(files) as SeccompMode[]) {
        writeFileSync(files[mode], seccompProgram(mode), { mode: 0o400 });
      }
      seccompFiles = files;
    }
    const bwrap = options.bwrapPath ?? findProgram('bwrap');
    let reason: string | null = null;
    if (bwrap === null) {
      reason =
        'bubblewrap (bwrap) was not found on PATH: install it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)';
    } else {
      reason = probe(bwrap, seccompFiles?.restricted ?? null);
    }
    return new Sandboxer(dir, sources, seccompFiles, {
      available: reason === null,
      reason,
      bwrap,
      seccomp: seccompFiles !== null,
    });
  }

  /**
   * The command prefix that runs a process under `context`. Rejects with SandboxUnavailableError when the profile
   * needs a sandbox this host cannot build, SandboxPolicyError when it cannot be read here. Its walks (deny globs,
   * nested protected names) run on the walk thread (walk-thread.ts); the plan is made and its mount points counted
   * after them, in one step.
   */
  async prepare(context: SandboxContext, options: PrepareOptions): Promise<PreparedSandbox> {
    if (this.closed) throw new SandboxUnavailableError('the sandbox is closed');
    let policy: SandboxPolicy;
    try {
      policy = await resolvePolicy(
        context,
        { tmpdir: options.tmpdir, cwd: sandboxCwd(context) ?? options.cwd },
        this.walkThread ?? IN_THREAD_WALKER,
      );
    } catch (err) {
      // Closed meanwhile, or the walk thread failed: the executor cannot sandbox this start, the request is fine.
      if (this.closed) throw new SandboxUnavailableError('the sandbox is closed');
      if (err instanceof WalkUnavailableError) throw new SandboxUnavailableError(err.message);
      throw err;
    }
    if (this.closed) throw new SandboxUnavailableError('the sandbox is closed');
    if (options.forceNetworkRestricted) policy.network = 'restricted';
    const managed = options.managedNetwork ?? null;
    if (!policy.restrictsFileSystem && policy.network === 'enabled' && managed === null) {
      // Nothing to confine (Codex runs these directly too, still reporting its sandbox type).
      return { policy, prefix: null, seccompFile: null, release: () => undefined };
    }
    if (!this.status.available || this.status.bwrap === null) {
      throw new SandboxUnavailableError(`this executor cannot enforce a sandbox: ${this.status.reason}`);
    }
    const seccompFile = this.seccompFiles?.[managed === null ? policy.network : 'proxied'] ?? null;
    const plan: BwrapPlan = bwrapArgs(policy, this.sources, {
      cwd: options.cwd,
      seccompFd: seccompFile === null ? null : 3,
      ...(options.extraReadable ? { extraReadable: options.extraReadable } : {}),
      ...(managed === null ? {} : { unshareNet: true }),
    });
    // A mount point another sandbox of ours made, found here as an empty directory, is this one's too until it
    // ends: removed under a running sandbox, its mount there would be detached (and the name writable again).
    const targets = [...plan.syntheticTargets, ...plan.emptyTargets.filter((target) => this.synthetic.has(target))];
    for (const target of targets) this.synthetic.set(target, (this.synthetic.get(target) ?? 0) + 1);
    let released = false;
    return {
      policy,
      prefix: { file: this.status.bwrap, args: [...plan.args, '--', ...(managed?.relay ?? [])] },
      seccompFile,
      release: () => {
        if (released) return;
        released = true;
        for (const target of targets) this.releaseTarget(target);
      },
    };
  }

  /** The last sandbox using a synthetic mount point is gone: the empty directory or file goes too. */
  private releaseTarget(target: string): void {
    const users = (this.synthetic.get(target) ?? 1) - 1;
    if (users > 0) {
      this.synthetic.set(target, users);
      return;
    }
    this.synthetic.delete(target);
    try {
      rmdirSync(target);
    } catch {
      try {
        // A mount point made for a file is an empty file; anything with content is left alone.
        const fd = openSync(target, constants.O_RDONLY | constants.O_NOFOLLOW);
        closeSync(fd);
        rmSync(target, { force: true });
      } catch {}
    }
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.walkThread?.close();
    for (const target of [...this.synthetic.keys()]) {
      this.synthetic.set(target, 1);
      this.releaseTarget(target);
    }
    if (this.dir === null) return;
    chmodSync(this.sources.deniedDirectory, 0o700);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Runs `true` in the namespaces a restricted profile needs; answers why it failed, or null. */
function probe(bwrap: string, seccompFile: string | null): string | null {
  const args = [
    '--die-with-parent',
    '--unshare-user',
    '--unshare-pid',
    '--unshare-ipc',
    '--unshare-net',
    '--ro-bind',
    '/',
    '/',
    '--dev',
    '/dev',
    '--proc',
    '/proc',
    '--cap-drop',
    'ALL',
    ...(seccompFile === null ? [] : ['--seccomp', '3']),
    '--',
    'true',
  ];
  let fd: number | null = null;
  try {
    if (seccompFile !== null) fd = openSync(seccompFile, 'r');
    const run = spawnSync(bwrap, args, { stdio: ['ignore', 'ignore', 'pipe', fd ?? 'ignore'], timeout: 10_000 });
    if (run.error) return `${bwrap} could not be run: ${run.error.message}`;
    if (run.status === 0) return null;
    const stderr = run.stderr?.toString().trim().slice(0, 2000) ?? '';
    return (
      `${bwrap} cannot create the sandbox's namespaces here (${stderr || `exit ${run.status}`}); ` +
      'user namespaces must be allowed (sysctl kernel.unprivileged_userns_clone=1, or on Ubuntu an AppArmor profile for bwrap), and inside a container the runtime must permit them'
    );
  } catch (err) {
    return `the sandbox could not be checked: ${(err as Error).message}`;
  } finally {
    if (fd !== null) closeSync(fd);
  }
}
