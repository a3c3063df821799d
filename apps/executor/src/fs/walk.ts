import type { Stats } from 'node:fs';
import { lstat, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import {
  type FsWalkEntry,
  type FsWalkOptions,
  type FsWalkResult,
  pathToFileUri,
  RpcError,
} from '@tether/exec-protocol';
import { fsError } from './os-error.js';

/** Entries one `fs/walk` answer may count, whatever the client asks (≈ 100 MB of JSON). */
export const MAX_WALK_ENTRIES = 1_000_000;

/**
 * `fs/walk` as Codex 0.171.0 does it: breadth first from `root` (not listed itself), each directory's
 * entries sorted by name, only regular files and directories (plus, with `followDirectorySymlinks`,
 * symlinks to directories, each real directory descended once). Directories deeper than `maxDepth`
 * (root's children are depth 0) are listed but not read. `maxEntries` counts every entry whose type
 * could be read, including the symlinks and special files that are not listed (as Codex counts);
 * `truncated` when `maxEntries` or `maxDirectories` cut the walk short. A directory that cannot be
 * read, or an entry whose type cannot be read, becomes an `errors` item.
 */
export async function walk(
  root: string,
  requested: FsWalkOptions,
  entryCap: number = MAX_WALK_ENTRIES,
): Promise<FsWalkResult> {
  if (requested.maxDirectories === 0 || requested.maxEntries === 0) {
    throw RpcError.invalidRequest('filesystem walk limits must be greater than zero');
  }
  // The server's own bound on one answer: a larger walk is reported as truncated.
  const options = { ...requested, maxEntries: Math.min(requested.maxEntries, entryCap) };
  const empty: FsWalkResult = { entries: [], errors: [], truncated: false };
  const follow = options.followDirectorySymlinks;
  const rootLink = await lstat(root).catch((err: unknown) => {
    throw fsError(err);
  });
  let rootStats: Stats = rootLink;
  if (rootLink.isSymbolicLink()) {
    if (!follow) return empty;
    rootStats = await stat(root).catch((err: unknown) => {
      throw fsError(err);
    });
  }
  if (!rootStats.isDirectory()) return empty;

  const visited = new Set<string>([identity(rootStats)]);
  const queue: { path: string; depth: number }[] = [{ path: root, depth: 0 }];
  const entries: FsWalkEntry[] = [];
  const errors: FsWalkResult['errors'] = [];
  let directoriesRead = 0;
  /** Entries that count against `maxEntries`: every one whose type could be read, listed or not. */
  let counted = 0;
  let head = 0;
  while (head < queue.length) {
    if (directoriesRead >= options.maxDirectories) return { entries, errors, truncated: true };
    const directory = queue[head++]!;
    directoriesRead++;
    let names: string[];
    try {
      names = await readdir(directory.path);
    } catch (err) {
      errors.push({ path: pathToFileUri(directory.path), message: fsError(err).message });
      continue;
    }
    names.sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
    for (const name of names) {
      const path = join(directory.path, name);
      // An entry that cannot be lstat-ed (say, a path beyond PATH_MAX) becomes an error item; a
      // dangling or looping symlink is skipped silently. Neither counts against maxEntries (as Codex).
      let info: Stats;
      try {
        info = await lstat(path);
      } catch (err) {
        errors.push({ path: pathToFileUri(path), message: fsError(err).message });
        continue;
      }
      let target: Stats | null = null;
      if (info.isSymbolicLink()) {
        target = await stat(path).catch(() => null);
        if (target === null) continue;
      }
      if (counted >= options.maxEntries) return { entries, errors, truncated: true };
      counted++;
      let kind: FsWalkEntry['kind'] | null = null;
      if (target === null) kind = info.isFile() ? 'file' : info.isDirectory() ? 'directory' : null;
      else if (follow && target.isDirectory()) kind = 'directory';
      if (kind === null) continue;
      entries.push({ path: pathToFileUri(path), kind });
      if (kind !== 'directory' || directory.depth >= options.maxDepth) continue;
      if (follow) {
        // Only followed links can make cycles or reach a directory twice.
        const key = identity(target ?? info);
        if (visited.has(key)) continue;
        visited.add(key);
      }
      queue.push({ path, depth: directory.depth + 1 });
    }
  }
  return { entries, errors, truncated: false };
}

function identity(stats: Stats): string {
  return `${stats.dev}:${stats.ino}`;
}
