import { type FSWatcher, lstatSync, watch } from 'node:fs';
import { dirname } from 'node:path';
import { FileUriError, type FsWatchMissingParams, fileUriToPath, RpcError } from '@tether/exec-protocol';

/** Paths one watch may name (`missing` and `present` together): each costs at most one inotify watch. */
export const MAX_WATCHED_PATHS = 256;

/**
 * `fs/watchMissing` of one connection, as Codex 0.171.0 answers it (CODEX-FINDINGS.md §18):
 *
 * - one watch at a time: a call with a higher `watchId` replaces the current one (silently, even when it
 *   answers `watching: false`, so `missing: []` cancels); an id at or below the last one taken changes nothing
 *   and answers false; a call that fails decoding takes no id;
 * - `watching: false` when there is nothing to wait for: a `missing` path exists already (a dangling link
 *   counts), `missing` is empty, `present` does not exist, or a URI names another host;
 * - it fires once, as `fs/missingChanged {watchId}`, when the first missing component of any `missing` path
 *   appears (the client looks again and watches again for a deeper path), when the existing directory above
 *   one is removed, or when `present` goes.
 *
 * Each path is watched through its nearest existing directory (node:fs `watch`, inotify on Linux). Closed
 * with the connection.
 */
export class MissingWatch {
  #lastId = 0;
  #current: ActiveWatch | null = null;
  #closed = false;

  constructor(private readonly notify: (watchId: number) => void) {}

  watch(params: FsWatchMissingParams): { watching: boolean } {
    if (params.missing.length + (params.present == null ? 0 : 1) > MAX_WATCHED_PATHS) {
      throw RpcError.invalidParams(`fs/watchMissing watches at most ${MAX_WATCHED_PATHS} paths`);
    }
    // Every URI is checked before the id is taken.
    const missing = params.missing.map(watchPath);
    const present = params.present == null ? undefined : watchPath(params.present);
    if (this.#closed || params.watchId <= this.#lastId) return { watching: false };
    this.#lastId = params.watchId;
    this.#cancel();
    if (missing.length === 0 || missing.some((path) => path === null) || present === null) return { watching: false };
    const paths = missing as string[];
    if (paths.some(exists) || (present !== undefined && !exists(present))) return { watching: false };
    const active = new ActiveWatch(params.watchId, paths, present, () => this.#fired(active));
    if (!active.start()) return { watching: false };
    this.#current = active;
    return { watching: true };
  }

  close(): void {
    this.#closed = true;
    this.#cancel();
  }

  #cancel(): void {
    this.#current?.stop();
    this.#current = null;
  }

  #fired(active: ActiveWatch): void {
    if (this.#current !== active) return;
    this.#current = null;
    active.stop();
    this.notify(active.watchId);
  }
}

/** A watched path, or null for a file URI of another host (Codex answers `watching: false` for those). */
function watchPath(uri: string): string | null {
  try {
    return fileUriToPath(uri);
  } catch (err) {
    if (err instanceof FileUriError) {
      if (err.kind === 'host') return null;
      throw RpcError.invalidParams(err.message);
    }
    throw err;
  }
}

function exists(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

function isDirectory(path: string): boolean {
  try {
    return lstatSync(path).isDirectory();
  } catch {
    return false;
  }
}

/** One path of a watch: the directory watched for it and the entry whose appearance fires it. */
interface Target {
  /** The nearest existing directory above the path. */
  directory: string;
  /** The first missing component below it (the path itself when its parent exists). */
  firstMissing: string;
}

class ActiveWatch {
  readonly #watchers: FSWatcher[] = [];
  readonly #targets: Target[];
  #stopped = false;

  constructor(
    readonly watchId: number,
    missing: string[],
    private readonly present: string | undefined,
    private readonly onFire: () => void,
  ) {
    this.#targets = missing.map(target);
  }

  /** Starts watching; false when a directory cannot be watched (then nothing is left open). */
  start(): boolean {
    const directories = new Set(this.#targets.map((t) => t.directory));
    if (this.present !== undefined) directories.add(dirname(this.present));
    try {
      for (const directory of directories) {
        const watcher = watch(directory, { persistent: false }, () => this.#check());
        watcher.on('error', () => this.#check());
        this.#watchers.push(watcher);
      }
    } catch {
      this.stop();
      return false;
    }
    // Something may have changed between the checks and the watches: look once more, after the answer.
    setImmediate(() => this.#check());
    return true;
  }

  stop(): void {
    this.#stopped = true;
    for (const watcher of this.#watchers.splice(0)) watcher.close();
  }

  #check(): void {
    if (this.#stopped) return;
    const changed =
      this.#targets.some((t) => exists(t.firstMissing) || !isDirectory(t.directory)) ||
      (this.present !== undefined && !exists(this.present));
    if (changed) this.onFire();
  }
}

function target(path: string): Target {
  let firstMissing = path;
  let directory = dirname(path);
  while (directory !== firstMissing && !isDirectory(directory)) {
    firstMissing = directory;
    directory = dirname(directory);
  }
  // `directory` exists (the root at worst); `firstMissing` is its child on the way to `path`.
  return { directory, firstMissing };
}
