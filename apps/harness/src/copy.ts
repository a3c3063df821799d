import { basename, posix } from 'node:path';
import { TetherError } from '@tether/client';

import type { CopyOptions, CopyStats, Endpoint } from './copy-types.js';
import { TreeCopy } from './tree-copy.js';

export { type CopyOptions, type CopyStats, type Endpoint, MAX_TREE_DEPTH } from './copy-types.js';
export { SHA256SUM_OUTPUT_BYTES, sha256Of } from './file-copy.js';

/**
 * Copies a file or (recursively) a directory between any two endpoints and checks every file's SHA-256 at
 * the destination against what was read at the source.
 *
 * A tree is walked once, depth first; its directories are created as they are reached and its files handed
 * to a pipeline of FILES_IN_FLIGHT jobs within BYTES_IN_FLIGHT. Where both sides offer `fileBatch` (a
 * local side always does), small files go BATCH_FILES to a request (`readFiles` at the source, `writeFiles`
 * at the destination), each with its own digest; larger files, and every file against an executor without
 * `fileBatch` (Codex's), stream through `fs/open` + blocks as before, several at once.
 *
 * The source side is untrusted input (an executor chooses the names in its listings). Every entry name
 * must be one path component, every destination path must resolve under the destination root, and no
 * symbolic link is ever created. A link inside a tree is skipped and reported (`onSkip`) in both
 * directions, as `rsync -r` skips each: neither made nor taken for what it points to. Under a local
 * destination root, an existing link where a file or directory would go is refused rather than written
 * through; the root itself, and the source named on the command line, are the user's choice and followed.
 *
 * Without `preserve`, a new file gets its source's permission bits less the destination's umask, as cp
 * and scp give it (where both sides can say and set modes); an existing one keeps its own.
 *
 * With `preserve`, permission bits (`0o7777`) and modification and access times (to the millisecond) are
 * read at the source before its bytes and set at the destination after them; a directory's, once
 * everything in it is written. Both sides must offer them (`fileMetadata`; a local side always does).
 */
export async function copy(source: Endpoint, destination: Endpoint, options: CopyOptions): Promise<CopyStats> {
  if (options.preserve) {
    for (const side of [source, destination]) {
      if (!side.fs.unixMetadata) {
        throw new TetherError(
          'invalid_argument',
          `-p needs file modes and times from both sides, and ${side.label} is on an executor without Tether's fileMetadata (a Codex exec-server has none); copy without -p`,
        );
      }
    }
  }
  const stats: CopyStats = { files: 0, directories: 0, bytes: 0, skipped: 0 };
  const meta = await source.fs.getMetadata(source.path);
  let target = destination.path;
  const existing = await destination.fs.getMetadata(target).catch(() => null);
  if (existing?.isDirectory) target = posix.join(target, basename(source.path));
  const job = new TreeCopy(source, destination, options, stats);
  if (meta.isDirectory) {
    if (!options.recursive) {
      throw new TetherError('invalid_argument', `${source.label} is a directory (use -r to copy directories)`);
    }
    await job.tree(source.path, target);
  } else {
    await job.single(source.path, target, meta.size);
  }
  return stats;
}
