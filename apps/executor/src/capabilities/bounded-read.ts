/**
 * Reading the files capability discovery materializes, treating the disk as untrusted: a size cap checked on
 * the open descriptor (and again while reading, for a file that grows), only regular files (a FIFO or device
 * named SKILL.md is refused without blocking), symlinks refused where Codex does not follow them.
 */
import { constants } from 'node:fs';
import { open } from 'node:fs/promises';

/** How Codex walks a skill or capability root (its fs/walk options). */
export const SKILL_WALK = { maxDepth: 6, maxDirectories: 2000, maxEntries: 20_000, followDirectorySymlinks: true };

/** Largest file discovery reads (Codex's 1 MiB per materialized file). */
export const MAX_CAPABILITY_FILE_BYTES = 1024 * 1024;

export type BoundedRead =
  | { kind: 'ok'; bytes: Buffer }
  /** The path is absent (or a dangling or refused link, or below a file). */
  | { kind: 'missing' }
  /** Not a regular file. */
  | { kind: 'not-a-file' }
  | { kind: 'too-large'; size: number }
  /** Reading it would pass the caller's remaining budget. */
  | { kind: 'over-budget'; size: number }
  | { kind: 'failed'; error: NodeJS.ErrnoException };

const MISSING = new Set(['ENOENT', 'ENOTDIR', 'ELOOP']);

/**
 * The bytes of `path` when it is a regular file of at most `max` bytes and `budget` allows its size. With
 * `followLinks: false` a symlink reads as missing (O_NOFOLLOW).
 */
export async function readBounded(
  path: string,
  options: { max?: number; budget?: number; followLinks: boolean },
): Promise<BoundedRead> {
  const max = options.max ?? MAX_CAPABILITY_FILE_BYTES;
  const flags = constants.O_RDONLY | constants.O_NONBLOCK | (options.followLinks ? 0 : constants.O_NOFOLLOW);
  let file: Awaited<ReturnType<typeof open>>;
  try {
    file = await open(path, flags);
  } catch (err) {
    const error = err as NodeJS.ErrnoException;
    if (MISSING.has(error.code ?? '')) return { kind: 'missing' };
    return { kind: 'failed', error };
  }
  try {
    const info = await file.stat();
    if (!info.isFile()) return { kind: 'not-a-file' };
    if (info.size > max) return { kind: 'too-large', size: info.size };
    if (options.budget !== undefined && info.size > options.budget) return { kind: 'over-budget', size: info.size };
    // One byte more than allowed tells a file that grew since the stat.
    const buffer = Buffer.allocUnsafe(Math.min(max, info.size) + 1);
    let filled = 0;
    while (filled < buffer.length) {
      const { bytesRead } = await file.read(buffer, filled, buffer.length - filled, filled);
      if (bytesRead === 0) break;
      filled += bytesRead;
    }
    if (filled > max) return { kind: 'too-large', size: filled };
    if (options.budget !== undefined && filled > options.budget) return { kind: 'over-budget', size: filled };
    return { kind: 'ok', bytes: buffer.subarray(0, filled) };
  } catch (err) {
    return { kind: 'failed', error: err as NodeJS.ErrnoException };
  } finally {
    await file.close();
  }
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** `bytes` as UTF-8, or null when they are not (Rust's `String::from_utf8`). */
export function utf8(bytes: Buffer): string | null {
  try {
    return strictUtf8.decode(bytes);
  } catch {
    return null;
  }
}
