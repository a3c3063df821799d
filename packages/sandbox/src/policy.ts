/**
 * A decoded `sandbox` context resolved against this host, as Codex resolves it (tests/conformance/
 * CODEX-FINDINGS.md §21): `root` is `/`; `minimal` the platform's read-only system directories;
 * `project_roots` each of `workspaceRoots` (none given: nothing; a subpath that leaves the root: nothing);
 * `tmpdir` the client's `temporaryDirectories`, else the process's `TMPDIR`; `slash_tmp` `/tmp` when it is a
 * directory; `unknown` nothing. The most specific entry wins, and at equal depth deny beats write beats read.
 * Inside every writable root (`/tmp` too) `.git`, `.agents`, `.codex` and `.aws` stay read-only, missing or
 * not (a missing one is an empty read-only directory while the sandbox runs), and so do those nested at any
 * depth below it that exist at launch (findNestedProtected; Codex protects only the top level) — except in a
 * writable `/` (an approved escalation), where, as in Codex, only the top level is.
 */
import { type Dirent, readdirSync, statSync } from 'node:fs';
import { dirname, isAbsolute, join, normalize, sep } from 'node:path';
import {
  type FileAccess,
  FileUriError,
  fileUriToPath,
  type NetworkAccess,
  restrictsFileSystem,
  type SandboxContext,
  sandboxNetwork,
} from '@tether/exec-protocol';
import { expandGlob } from './glob.js';

/** The read-only system directories `minimal` opens (those that exist). */
export const PLATFORM_READ_ROOTS = [
  '/bin',
  '/sbin',
  '/usr',
  '/etc',
  '/lib',
  '/lib64',
  '/nix/store',
  '/run/current-system/sw',
];
/** Names kept read-only inside every writable root, at its top and (those that exist) at any depth below. */
export const PROTECTED_NAMES = ['.git', '.agents', '.codex', '.aws'];
/**
 * Directories a launch-time search of one writable root for nested protected names may list, and entries it
 * may look at; past either the profile is refused (SandboxPolicyError), never run with the rest unsearched.
 */
export const MAX_PROTECTED_SCAN_DIRECTORIES = 50_000;
export const MAX_PROTECTED_SCAN_ENTRIES = 1_000_000;

/** How far findNestedProtected searches before it refuses the profile. */
export interface ScanLimits {
  directories: number;
  entries: number;
}

/** A request the policy cannot be built from (a path URI of another host, a glob); the message says which. */
export class SandboxPolicyError extends Error {
  override readonly name = 'SandboxPolicyError';
}

export interface ResolvedEntry {
  path: string;
  access: FileAccess;
  skipMissing: boolean;
}

export interface SandboxPolicy {
  /** Whether the filesystem is confined at all (else only the network and the namespaces are). */
  restrictsFileSystem: boolean;
  network: NetworkAccess;
  /** The whole disk is readable (else only the readable entries are, over an empty root). */
  fullRead: boolean;
  /** Resolved entries, deepest last (each mount goes over the ones it is under). */
  entries: ResolvedEntry[];
  /** Writable directories (existing ones are bound writable). */
  writable: string[];
  /** Protected names under writable roots: read-only if present, an empty read-only directory if not. */
  protectedPaths: string[];
  /**
   * Those of protectedPaths found below a root's top level (findNestedProtected): bound `--ro-bind-try`, so
   * one removed between the walk and bubblewrap's start (by another process) does not fail the launch.
   */
  nestedProtectedPaths: string[];
}

export interface ResolveOptions {
  /** The process's (or, for fs calls, the executor's) TMPDIR. */
  tmpdir?: string | undefined;
  /** What a relative glob is read against (the sandbox's cwd, else the command's). */
  cwd?: string | undefined;
}

/** A glob's prefix that means "under each workspace root" (Codex's). */
const PROJECT_ROOTS_GLOB = 'codex-project-roots://';

function native(uri: string, what: string): string {
  try {
    return fileUriToPath(uri);
  } catch (err) {
    if (err instanceof FileUriError) throw new SandboxPolicyError(`invalid sandbox ${what} URI: ${err.message}`);
    throw err;
  }
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

/** A subpath inside a root; one that is absolute or climbs out with `..` names nothing. */
function under(root: string, subpath: string | null): string | null {
  if (subpath === null || subpath === '') return root;
  if (isAbsolute(subpath)) return null;
  const joined = normalize(join(root, subpath));
  return joined === root || joined.startsWith(root.endsWith(sep) ? root : root + sep) ? joined : null;
}

export function depth(path: string): number {
  return path === '/' ? 0 : path.split('/').filter(Boolean).length;
}

const ACCESS_RANK: Record<FileAccess, number> = { read: 0, write: 1, deny: 2 };

/** Linux's PATH_MAX: bubblewrap cannot name a longer path (`File name too long`), nor can a command. */
const PATH_MAX = 4096;

/**
 * `path`, or where it is too long for bubblewrap to mount (a tree nested past PATH_MAX, which a command can
 * still reach by relative steps), its deepest ancestor that is not: kept read-only whole, the launch works.
 */
function nameable(path: string): string {
  let kept = path;
  while (Buffer.byteLength(kept) >= PATH_MAX) kept = dirname(kept);
  return kept;
}

/**
 * The protected names that exist below `root` (not its own top level), found by walking it: links are not
 * followed, a protected directory is not entered, nor is a path with an entry of its own that is not a write
 * (read-only or denied already). A repository nested in a workspace (`sub/.git/hooks`) would otherwise be
 * writable, and a later unconfined `git` there would run what the command planted. Bounded (the constants
 * above): past a bound the profile is refused. Synchronous: the Sandboxer runs it on its walk thread (walk-thread.ts).
 */
export function findNestedProtected(
  root: string,
  entries: Map<string, ResolvedEntry>,
  limits: ScanLimits = { directories: MAX_PROTECTED_SCAN_DIRECTORIES, entries: MAX_PROTECTED_SCAN_ENTRIES },
): string[] {
  const found: string[] = [];
  let directories = 0;
  let looked = 0;
  const pending = [root];
  while (pending.length > 0) {
    const dir = pending.pop()!;
    if (++directories > limits.directories) {
      throw new SandboxPolicyError(
        `the writable root ${root} has more than ${limits.directories} directories to search for nested ${PROTECTED_NAMES.join('/')} (which are kept read-only); make a smaller directory writable`,
      );
    }
    let listing: Dirent[];
    try {
      listing = readdirSync(dir, { withFileTypes: true });
    } catch (err) {
      // Gone: nothing to keep. Not listable (a mode 311 directory): what it holds cannot be known, but a
      // command that knows the names can still reach them, so the whole directory is kept read-only.
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ENOTDIR' && dir !== root) found.push(nameable(dir));
      continue;
    }
    looked += listing.length;
    if (looked > limits.entries) {
      throw new SandboxPolicyError(
        `the writable root ${root} has more than ${limits.entries} entries to search for nested ${PROTECTED_NAMES.join('/')} (which are kept read-only); make a smaller directory writable`,
      );
    }
    for (const entry of listing) {
      const path = join(dir, entry.name);
      if (PROTECTED_NAMES.includes(entry.name)) {
        // A link by that name cannot be mounted over (bubblewrap would fail the launch); what it names is
        // writable, or not, by its own place.
        if (dir !== root && !entry.isSymbolicLink()) found.push(nameable(path));
        continue;
      }
      if (!entry.isDirectory()) continue;
      const own = entries.get(path);
      if (own !== undefined && own.access !== 'write') continue;
      // Another writable root: searched as itself.
      if (own === undefined) pending.push(path);
    }
  }
  return found;
}

/**
 * A walker could not walk at all (its thread closed or failed): the executor's fault, not the policy's, so it is
 * not turned into a SandboxPolicyError (which blames the request).
 */
export class WalkUnavailableError extends Error {
  override readonly name = 'WalkUnavailableError';
}

/**
 * Where a policy's walks of the disk run. Each may list up to a million directory entries (MAX_GLOB_VISITS,
 * MAX_PROTECTED_SCAN_ENTRIES): on an executor's event loop that is every other session stopped for a second or more.
 * Either walk rejects with WalkUnavailableError when it could not run at all.
 */
export interface Walker {
  /** expandGlob's answer (its GlobExpansionError, or another Error, when it cannot). */
  glob(pattern: string, maxDepth: number | null): Promise<string[]>;
  /** findNestedProtected's answer (its SandboxPolicyError when past a bound; `limits` as its own). */
  nested(root: string, entries: Map<string, ResolvedEntry>, limits?: ScanLimits): Promise<string[]>;
}

/** The walks on the calling thread (tests, and the Sandboxer when its walk thread is gone). */
export const IN_THREAD_WALKER: Walker = {
  glob: async (pattern, maxDepth) => expandGlob(pattern, maxDepth),
  nested: async (root, entries, limits) => findNestedProtected(root, entries, limits),
};

/**
 * The policy `context` asks for, as paths of this host. Its walks (deny globs, nested protected names) are
 * `walker`'s: on this thread by default, on the Sandboxer's walk thread when it prepares a sandbox.
 */
export async function resolvePolicy(
  context: SandboxContext,
  options: ResolveOptions = {},
  walker: Walker = IN_THREAD_WALKER,
): Promise<SandboxPolicy> {
  const network = sandboxNetwork(context);
  const restricted = restrictsFileSystem(context);
  const permissions = context.permissions;
  if (!restricted || permissions.type !== 'managed' || permissions.fileSystem.type !== 'restricted') {
    return {
      restrictsFileSystem: false,
      network,
      fullRead: true,
      entries: [],
      writable: [],
      protectedPaths: [],
      nestedProtectedPaths: [],
    };
  }
  const roots = context.workspaceRoots.map((uri) => native(uri, 'workspace root'));
  const temporary =
    context.temporaryDirectories !== null
      ? context.temporaryDirectories.map((uri) => native(uri, 'temporary directory'))
      : options.tmpdir && isAbsolute(options.tmpdir)
        ? [options.tmpdir]
        : [];
  const resolved: ResolvedEntry[] = [];
  for (const entry of permissions.fileSystem.entries) {
    const where = entry.path;
    const add = (path: string | null) => {
      if (path !== null) resolved.push({ path: normalize(path), access: entry.access, skipMissing: entry.skipMissing });
    };
    if (where.type === 'glob_pattern') {
      // A glob only denies; it is expanded now into the files it matches (glob.ts).
      if (entry.access !== 'deny') continue;
      const patterns = where.pattern.startsWith(PROJECT_ROOTS_GLOB)
        ? roots.map((root) => join(root, where.pattern.slice(PROJECT_ROOTS_GLOB.length)))
        : [isAbsolute(where.pattern) ? where.pattern : join(options.cwd ?? '/', where.pattern)];
      for (const pattern of patterns) {
        try {
          for (const match of await walker.glob(pattern, permissions.fileSystem.globScanMaxDepth ?? null)) add(match);
        } catch (err) {
          if (err instanceof WalkUnavailableError) throw err;
          throw new SandboxPolicyError((err as Error).message);
        }
      }
      continue;
    }
    if (where.type === 'path') {
      add(native(where.path, 'permission path'));
      continue;
    }
    switch (where.kind) {
      case 'root':
        add(under('/', where.subpath));
        break;
      case 'minimal':
        for (const dir of PLATFORM_READ_ROOTS) if (isDirectory(dir)) add(dir);
        break;
      case 'project_roots':
        for (const root of roots) add(under(root, where.subpath));
        break;
      case 'tmpdir':
        for (const dir of temporary) add(under(dir, where.subpath));
        break;
      case 'slash_tmp':
        if (isDirectory('/tmp')) add(under('/tmp', where.subpath));
        break;
      case 'unknown':
        break;
    }
  }
  // One entry per path: at equal depth (the same path) deny beats write beats read.
  const byPath = new Map<string, ResolvedEntry>();
  for (const entry of resolved) {
    const known = byPath.get(entry.path);
    if (known === undefined || ACCESS_RANK[entry.access] > ACCESS_RANK[known.access]) byPath.set(entry.path, entry);
  }
  const entries = [...byPath.values()].sort((a, b) => depth(a.path) - depth(b.path));
  const fullRead = byPath.get('/') !== undefined && byPath.get('/')!.access !== 'deny';
  const writable = entries.filter((e) => e.access === 'write').map((e) => e.path);
  const writableRoots = entries.filter((e) => e.access === 'write');
  const topLevel = new Set(writableRoots.flatMap((root) => PROTECTED_NAMES.map((name) => join(root.path, name))));
  // A writable `/` is an approved escalation that keeps the profile's denials (Codex's
  // `linuxApprovedRootWritePreservesRestrictions`): the whole disk was granted, so, as Codex, only its top
  // level's protected names are kept (a search of every directory would refuse it on any real machine).
  // Asked all at once: the walk thread takes them one after another, with one wake-up between them and this thread.
  const searched = await Promise.all(
    writableRoots.filter((root) => root.path !== '/').map((root) => walker.nested(root.path, byPath)),
  );
  const nested = new Set(searched.flat().filter((path) => !topLevel.has(path)));
  return {
    restrictsFileSystem: true,
    network,
    fullRead,
    entries,
    writable,
    protectedPaths: [...topLevel, ...nested],
    nestedProtectedPaths: [...nested],
  };
}
