/** What a copy is given and reports, and the bounds it keeps (shared by the tree walk and the file copies). */
import { type Environment, type EnvironmentFs, TetherError } from '@tether/client';

// The SDK's batch and metadata types, as its EnvironmentFs methods name them.
export type UnixMetadata = Awaited<ReturnType<EnvironmentFs['getUnixMetadata']>>;
export type SmallFileWritten = Awaited<ReturnType<EnvironmentFs['writeFiles']>>[number];

/** One side of a copy: a filesystem and, when remote, the environment to hash on. */
export interface Endpoint {
  fs: EnvironmentFs;
  /** Remote: where `sha256sum` runs. Local: null (hashed in process). */
  env: Environment | null;
  path: string;
  label: string;
}

export interface CopyStats {
  files: number;
  directories: number;
  bytes: number;
  /** Entries of a tree that were not copied: symbolic links, and what is neither file nor directory. */
  skipped: number;
}

export interface CopyOptions {
  recursive: boolean;
  /** Keep each file's and directory's permission bits and modification and access times (`cp -p`). */
  preserve?: boolean;
  /** Called as bytes move (for a progress line). */
  onProgress?: (file: string, done: number, total: number) => void;
  /** Called when a file has been copied and verified. */
  onFile?: (file: string, bytes: number, sha256: string) => void;
  /**
   * Called for each entry of a tree that is not copied (a source path): a symbolic link (`link`: no link is
   * ever made, and one is not taken for what it points to), or neither file nor directory (`special`).
   */
  onSkip?: (path: string, kind: 'link' | 'special') => void;
}

/**
 * Deepest directory nesting a recursive copy descends into: a listing that never ends (a hostile executor
 * answering every directory with another one, or a link loop it follows) stops here with an error.
 */
export const MAX_TREE_DEPTH = 256;

/** Jobs (a batch of small files, or one streamed file) a tree copy runs at once. */
export const FILES_IN_FLIGHT = 8;
/**
 * Bytes a tree copy has on the wire at once, as base64 where it is: 3 MiB keeps what an executor answers
 * under the relay's 4 MiB backlog per harness (past which it resets a harness that reads too slowly). A
 * job larger than this (a big file streams with 3 blocks of 1 MiB in flight) runs alone.
 */
export const BYTES_IN_FLIGHT = 3 * 1024 * 1024;
/** Files up to this size travel whole, many to a request, where both sides offer `fileBatch`. */
export const SMALL_FILE_BYTES = 256 * 1024;
/** File bytes per batch (`readFiles`/`writeFiles`), and files per batch. */
export const BATCH_BYTES = 512 * 1024;
export const BATCH_FILES = 256;

/** A file whose bytes at `where` do not hash to what was read at the source. */
export function integrityError(to: string, where: string, actual: string, expected: string): TetherError {
  return new TetherError(
    'protocol',
    `integrity check failed for ${to}: sha256 ${actual} ${where}, ${expected} read from the source`,
  );
}
