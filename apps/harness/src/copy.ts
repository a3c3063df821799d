import { createHash, type Hash } from 'node:crypto';
import { lstat, open } from 'node:fs/promises';
import path, { basename, posix } from 'node:path';
import type { Writable } from 'node:stream';
import { finished } from 'node:stream/promises';
import {
  DEFAULT_BLOCK_SIZE,
  type DirectoryEntry,
  type Environment,
  type EnvironmentFs,
  entryNameProblem,
  type FileReadStream,
  type HandleDigest,
  TetherError,
} from '@tether/client';
import { pathError } from './fs-errors.js';

// The SDK's batch and metadata types, as its EnvironmentFs methods name them.
type UnixMetadata = Awaited<ReturnType<EnvironmentFs['getUnixMetadata']>>;
type SmallFileWritten = Awaited<ReturnType<EnvironmentFs['writeFiles']>>[number];

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
/** Directory listings of a remote source asked for ahead of the walk. */
const PREFETCH_LISTINGS = 8;

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

/** Where a tree copy writes: the destination root (checked against), this directory, and its depth. */
interface TreePlace {
  root: string;
  to: string;
  depth: number;
}

/** One file of a tree: where it is read and where it is written. */
interface Item {
  from: string;
  to: string;
}

/** A unit of the pipeline: its bytes on the wire at most, and what it does (maybe handing back more jobs). */
interface Job {
  cost: number;
  run(): Promise<Job[] | undefined>;
}

/**
 * Runs jobs, at most `slots` at once and within `bytes` of cost together (a job costlier than that runs
 * alone), in order. A job's follow-ups go to the front. The first failure stops everything: queued jobs
 * are dropped, running ones finish (their handles close), and `drain()` throws it.
 */
class Pipeline {
  private readonly queue: Job[] = [];
  private running = 0;
  private used = 0;
  private failure: { error: unknown } | null = null;
  private wake: (() => void) | null = null;
  private changed: Promise<void> | null = null;

  constructor(
    private readonly slots: number,
    private readonly bytes: number,
  ) {}

  add(job: Job): void {
    this.check();
    this.queue.push(job);
    this.pump();
  }

  /** Resolves once the queue is short enough for the producer to add another job (backpressure). */
  async room(): Promise<void> {
    while (this.queue.length >= this.slots && !this.failure) await this.next();
    this.check();
  }

  /** Resolves when every job has run; throws the first failure once the running jobs have ended. */
  async drain(): Promise<void> {
    while ((this.queue.length > 0 && !this.failure) || this.running > 0) await this.next();
    this.check();
  }

  /** Stops: nothing more starts; resolves when the running jobs have ended. */
  async stop(error: unknown): Promise<void> {
    this.failure ??= { error };
    this.queue.length = 0;
    while (this.running > 0) await this.next();
  }

  private check(): void {
    if (this.failure) throw this.failure.error;
  }

  private next(): Promise<void> {
    this.changed ??= new Promise<void>((resolve) => {
      this.wake = resolve;
    });
    return this.changed;
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = null;
    this.changed = null;
    wake?.();
  }

  private pump(): void {
    while (!this.failure && this.queue.length > 0 && this.running < this.slots) {
      const job = this.queue[0] as Job;
      const cost = Math.min(job.cost, this.bytes);
      if (this.used > 0 && this.used + cost > this.bytes) break;
      this.queue.shift();
      this.running++;
      this.used += cost;
      job
        .run()
        .then(
          (more) => {
            if (more && !this.failure) this.queue.unshift(...more);
          },
          (error: unknown) => {
            this.failure ??= { error };
            this.queue.length = 0;
          },
        )
        .finally(() => {
          this.running--;
          this.used -= cost;
          this.pump();
          this.notify();
        });
    }
  }
}

/** What a batch costs on the wire: its bytes as base64 and a little JSON per file. */
const BATCH_COST = Math.ceil((BATCH_BYTES * 4) / 3) + BATCH_FILES * 256;
/** What a streamed file of `size` bytes costs (its blocks in flight, at most the whole budget). */
const streamCost = (size: number) => Math.min(BYTES_IN_FLIGHT, Math.ceil((Math.max(size, 1) * 4) / 3) + 4096);
/** A streamed file whose size is not known yet: it learns it, and comes back with its cost if larger. */
const PROBE_COST = 1024 * 1024;

const sha256Hex = (data: Buffer) => createHash('sha256').update(data).digest('hex');

/** One copy: the walk, the pipeline it feeds, and with `preserve` the directories still to be given their metadata. */
class TreeCopy {
  private readonly pipeline = new Pipeline(FILES_IN_FLIGHT, BYTES_IN_FLIGHT);
  private readonly batching: boolean;
  private readonly preserve: boolean;
  private pending: Item[] = [];
  /** A remote destination's directories asked for so far (jobs wait for them before writing). */
  private made: Promise<unknown> = Promise.resolve();
  /** Listings asked for ahead of the walk (see `prefetch`). */
  private readonly listings = new Map<string, Promise<DirectoryEntry[]>>();
  /** With `preserve`: each directory made, set once its contents are written (deepest last in the list). */
  private readonly directories: Array<Item & { depth: number }> = [];
  /** The destination's umask, asked for once when a new file's mode needs it. */
  private umask: Promise<number> | null = null;

  constructor(
    private readonly source: Endpoint,
    private readonly destination: Endpoint,
    private readonly options: CopyOptions,
    private readonly stats: CopyStats,
  ) {
    this.batching = source.fs.batching && destination.fs.batching;
    this.preserve = options.preserve === true;
  }

  /** One file, streamed (whatever its size: one file gains nothing from a batch). */
  async single(from: string, to: string, size: number): Promise<void> {
    const metadata = this.preserve ? await this.source.fs.getUnixMetadata(from) : null;
    const mode = await this.newFileMode(to, await this.sourceMode(from));
    await copyFile(this.source, from, this.destination, to, size, this.options, this.stats);
    if (metadata) await this.destination.fs.setMetadata(to, metadata);
    if (mode !== null) await this.destination.fs.setMode(to, mode);
  }

  /** A file's permission bits at the source, for `newFileMode` (null where the source cannot say: Codex's). */
  private async sourceMode(from: string): Promise<number | null> {
    if (this.preserve || !this.source.fs.unixMetadata || !this.destination.fs.unixMetadata) return null;
    return (await this.source.fs.getUnixMetadata(from)).mode;
  }

  /**
   * The mode to give the file about to be written at `to`, or null to leave it as created. Without -p, a new
   * file gets its source's permission bits less the destination's umask, as cp and scp give it (a 0700
   * script stays 0700 with umask 022); an existing file keeps its own. Null too where the default creation
   * mode is that already (no question asked), or the destination cannot set modes (a Codex exec-server).
   * Asks whether the file exists, so call it before writing.
   */
  private async newFileMode(to: string, sourceMode: number | null): Promise<number | null> {
    if (sourceMode === null) return null;
    this.umask ??= destinationUmask(this.destination);
    const umask = await this.umask;
    const wanted = sourceMode & 0o777 & ~umask;
    if (wanted === (0o666 & ~umask)) return null;
    const exists = await this.destination.fs.getMetadata(to).then(
      () => true,
      () => false,
    );
    return exists ? null : wanted;
  }

  async tree(from: string, root: string): Promise<void> {
    try {
      await this.walk(from, { root, to: root, depth: 0 });
      this.flush();
      await this.pipeline.drain();
      await this.made; // an empty directory's failure too
    } catch (err) {
      await this.pipeline.stop(err);
      throw err;
    }
    if (this.preserve) {
      // Children before parents: writing a directory's metadata last keeps its times (and a mode without
      // write permission does not stop what goes inside).
      const directories = this.directories.reverse();
      for (let i = 0; i < directories.length; i += FILES_IN_FLIGHT) {
        await Promise.all(
          directories.slice(i, i + FILES_IN_FLIGHT).map(async ({ from: dir, to, depth }) => {
            const metadata = await this.source.fs.getUnixMetadata(dir);
            // The root is the user's choice (a link there is followed); below it, no link is written through.
            const noFollow = this.destination.env === null && depth > 0;
            await this.destination.fs.setMetadata(to, metadata, { noFollow });
          }),
        );
      }
    }
  }

  private async walk(from: string, place: TreePlace): Promise<void> {
    const { destination } = this;
    if (place.depth > MAX_TREE_DEPTH) {
      throw new TetherError(
        'protocol',
        `${from} nests directories deeper than ${MAX_TREE_DEPTH} levels; not following`,
      );
    }
    if (destination.env === null) {
      if (place.depth > 0) await refuseLocalLink(destination, place.to);
      await destination.fs.createDirectory(place.to, { recursive: true });
      if (place.depth > 0) await refuseLocalLink(destination, place.to); // nothing was swapped in meanwhile
    } else {
      // Not waited for here: the jobs with files inside wait for every directory asked for before them.
      const made = destination.fs.createDirectory(place.to, { recursive: true });
      made.catch(() => undefined);
      this.made = Promise.all([this.made, made]);
    }
    this.stats.directories++;
    if (this.preserve) this.directories.push({ from, to: place.to, depth: place.depth });
    const entries = (await this.markLinks(from, await this.list(from))).map((entry) => ({
      entry,
      child: posix.join(from, entry.fileName),
      target: childPath(destination, place, from, entry.fileName),
    }));
    this.prefetch(entries.filter(({ entry }) => entry.isDirectory && !entry.isSymlink).map(({ child }) => child));
    for (const { entry, child, target } of entries) {
      if (entry.isSymlink) {
        // Never made, never followed, in either direction: said, as rsync -r says it of each link.
        this.skip(child, 'link');
      } else if (entry.isDirectory) {
        await this.walk(child, { ...place, to: target, depth: place.depth + 1 });
      } else if (entry.isFile) {
        await this.file({ from: child, to: target });
      } else {
        // Sockets, FIFOs, devices: not regular content.
        this.skip(child, 'special');
      }
    }
  }

  private skip(path: string, kind: 'link' | 'special'): void {
    this.stats.skipped++;
    this.options.onSkip?.(path, kind);
  }

  /**
   * The listing with each link marked: a local listing and an executor with `directoryLinks` mark them; an
   * executor without (Codex's follows links when it lists) is asked about each entry (`isSymlink` of
   * fs/getMetadata). A dangling link such an executor leaves out of its listing is not seen at all.
   */
  private async markLinks(from: string, entries: DirectoryEntry[]): Promise<DirectoryEntry[]> {
    if (entries.every((entry) => entry.isSymlink !== undefined)) return entries;
    const marked: DirectoryEntry[] = new Array(entries.length);
    let next = 0;
    const worker = async () => {
      while (next < entries.length) {
        const index = next++;
        const entry = entries[index] as DirectoryEntry;
        const name = entryNameProblem(entry.fileName) === null ? entry.fileName : null;
        const isSymlink =
          entry.isSymlink ??
          (name === null ? false : (await this.source.fs.getMetadata(posix.join(from, name))).isSymlink === true);
        marked[index] = { ...entry, isSymlink };
      }
    };
    await Promise.all(Array.from({ length: Math.min(FILES_IN_FLIGHT * 2, entries.length) }, worker));
    return marked;
  }

  /** A directory's listing: asked for ahead by `prefetch`, else now. */
  private list(from: string): Promise<DirectoryEntry[]> {
    const ahead = this.listings.get(from);
    if (!ahead) return this.source.fs.readDirectory(from);
    this.listings.delete(from);
    return ahead;
  }

  /**
   * Asks a remote source for the listings of the next directories the walk will enter (at most
   * PREFETCH_LISTINGS held), so their round trips overlap instead of adding up.
   */
  private prefetch(directories: string[]): void {
    if (this.source.env === null) return;
    for (const directory of directories) {
      if (this.listings.size >= PREFETCH_LISTINGS) return;
      const listing = this.source.fs.readDirectory(directory);
      listing.catch(() => undefined); // awaited when the walk gets there
      this.listings.set(directory, listing);
    }
  }

  private async file(item: Item): Promise<void> {
    await this.pipeline.room();
    if (!this.batching) {
      this.pipeline.add(this.streamJob(item, null));
      return;
    }
    this.pending.push(item);
    if (this.pending.length >= BATCH_FILES) this.flush();
  }

  private flush(): void {
    if (this.pending.length === 0) return;
    this.pipeline.add(this.batchJob(this.pending));
    this.pending = [];
  }

  private batchJob(items: Item[]): Job {
    const made = this.made;
    return {
      cost: BATCH_COST,
      run: async () => {
        await made;
        return this.runBatch(items);
      },
    };
  }

  /**
   * Reads a batch whole at the source and writes it whole at the destination, checking each file's
   * digests; a file too large for a batch is handed back as a stream, and what did not fit as a batch.
   */
  private async runBatch(items: Item[]): Promise<Job[]> {
    const { source, destination } = this;
    const reads = await source.fs.readFiles(
      items.map((item) => item.from),
      { maxFileBytes: SMALL_FILE_BYTES, maxTotalBytes: BATCH_BYTES },
    );
    const more: Job[] = [];
    const deferred: Item[] = [];
    const ready: Array<{ item: Item; data: Buffer; sha256: string | null; metadata: UnixMetadata }> = [];
    reads.forEach((read, index) => {
      const item = items[index] as Item;
      if (read.kind === 'data') ready.push({ item, ...read });
      else if (read.kind === 'tooLarge') more.push(this.streamJob(item, read.size));
      else if (read.kind === 'deferred') deferred.push(item);
      else throw read.error;
    });
    if (deferred.length > 0) more.unshift(this.batchJob(deferred));
    if (ready.length === 0) return more;
    // What the source read must be what arrived here (a remote source's digest of what it read).
    const passed = ready.map(({ item, data, sha256 }) => {
      const digest = sha256Hex(data);
      if (sha256 !== null && sha256 !== digest) {
        throw integrityError(item.to, 'received', digest, sha256);
      }
      return digest;
    });
    // Without -p, new files keep their source's mode (less the umask): asked before anything is written.
    const modes =
      this.preserve || !destination.fs.unixMetadata
        ? null
        : await Promise.all(ready.map(({ item, metadata }) => this.newFileMode(item.to, metadata.mode)));
    const written = await destination.fs.writeFiles(
      ready.map(({ item, data, metadata }) => ({
        path: item.to,
        data,
        noFollow: destination.env === null,
        ...(this.preserve ? { metadata } : {}),
      })),
    );
    for (let i = 0; i < ready.length; i++) {
      const { item, data } = ready[i] as (typeof ready)[number];
      const result = written[i] as SmallFileWritten;
      if ('error' in result) {
        // A local destination is written with O_NOFOLLOW: a link planted where a file goes fails with ELOOP.
        const cause = (result.error as { cause?: { code?: unknown } }).cause;
        if (destination.env === null && cause?.code === 'ELOOP') throw linkRefusal(item.to);
        throw result.error;
      }
      const expected = passed[i] as string;
      // What the destination holds: its executor's digest of what it wrote; for a local destination fed
      // the checked bytes of a remote source, what this process wrote; else read back.
      let atDestination: string;
      if (result.sha256 !== null) atDestination = result.sha256;
      else if (source.env !== null) atDestination = expected;
      else atDestination = await sha256Of(destination, item.to);
      if (atDestination !== expected) throw integrityError(item.to, 'at the destination', atDestination, expected);
      const mode = modes?.[i] ?? null;
      if (mode !== null) await destination.fs.setMode(item.to, mode, { noFollow: destination.env === null });
      this.stats.files++;
      this.stats.bytes += data.byteLength;
      this.options.onProgress?.(item.from, data.byteLength, data.byteLength);
      this.options.onFile?.(item.to, data.byteLength, expected);
    }
    return more;
  }

  /**
   * Streams one file (`size` null: not known yet; it is asked for first, and a file that turns out to
   * cost more than a probe comes back as a job of its own cost).
   */
  private streamJob(item: Item, size: number | null): Job {
    const cost = size === null ? PROBE_COST : streamCost(size);
    const made = this.made;
    return {
      cost,
      run: async () => {
        await made;
        const { source, destination } = this;
        const known = size ?? (await source.fs.getMetadata(item.from)).size;
        if (streamCost(known) > cost) return [this.streamJob(item, known)];
        const metadata = this.preserve ? await source.fs.getUnixMetadata(item.from) : null;
        await refuseLocalLink(destination, item.to);
        const mode = await this.newFileMode(item.to, await this.sourceMode(item.from));
        await copyFile(source, item.from, destination, item.to, known, this.options, this.stats, { noFollow: true });
        if (metadata) await destination.fs.setMetadata(item.to, metadata, { noFollow: destination.env === null });
        if (mode !== null) await destination.fs.setMode(item.to, mode, { noFollow: destination.env === null });
        return undefined;
      },
    };
  }
}

function integrityError(to: string, where: string, actual: string, expected: string): TetherError {
  return new TetherError(
    'protocol',
    `integrity check failed for ${to}: sha256 ${actual} ${where}, ${expected} read from the source`,
  );
}

/**
 * The destination path of one listed entry, or a clear error: the name must be a single component (not
 * empty, `.`, `..`, nor holding `/`, NUL, or on a local Windows destination `\\`), and the joined path must
 * still lie under the destination root once resolved.
 */
function childPath(destination: Endpoint, place: TreePlace, from: string, name: string): string {
  const problem =
    entryNameProblem(name) ??
    (destination.env === null && path.sep === '\\' && name.includes('\\') ? 'contains "\\"' : null);
  if (problem) {
    throw new TetherError(
      'protocol',
      `refusing entry ${JSON.stringify(name)} listed in ${from}: the name ${problem} (an entry must be one path component)`,
    );
  }
  const paths = destination.env === null ? path : posix;
  const target = paths.join(place.to, name);
  const relative = paths.relative(paths.resolve(place.root), paths.resolve(target));
  if (relative === '' || relative === '..' || relative.startsWith(`..${paths.sep}`) || paths.isAbsolute(relative)) {
    throw new TetherError(
      'protocol',
      `refusing entry ${JSON.stringify(name)} listed in ${from}: it would be written outside ${place.root}`,
    );
  }
  return target;
}

/**
 * Under a local destination, a symbolic link where the copy would write is refused: writing through it
 * (or descending into it) would put a remote side's bytes wherever the link points.
 */
async function refuseLocalLink(destination: Endpoint, target: string): Promise<void> {
  if (destination.env !== null) return;
  const info = await lstat(target).catch(() => null);
  if (info?.isSymbolicLink()) throw linkRefusal(target);
}

function linkRefusal(target: string): TetherError {
  return new TetherError(
    'invalid_state',
    `refusing to write through the symbolic link ${target} inside the destination; remove it or copy elsewhere`,
  );
}

async function copyFile(
  source: Endpoint,
  from: string,
  destination: Endpoint,
  to: string,
  size: number,
  options: CopyOptions,
  stats: CopyStats,
  sinkOptions: { noFollow?: boolean } = {},
): Promise<void> {
  const hash = createHash('sha256');
  let done = 0;
  const meter = (chunk: Buffer) => {
    hash.update(chunk);
    done += chunk.byteLength;
    options.onProgress?.(from, done, size);
  };
  // Executors with `fileHandleDigest` hash what they read or wrote through the handle as it passes, so
  // neither side has to read the file again: the source's digest (a remote source) or the destination's
  // (a remote destination) is compared with the hash of the bytes that went through this process.
  const remote: { source: HandleDigest | null; destination: HandleDigest | null } = {
    source: null,
    destination: null,
  };
  const sink = destination.fs.createWriteStream(to, {
    ...(sinkOptions.noFollow ? { noFollow: true } : {}),
    onDigest: (digest) => {
      remote.destination = digest;
    },
  });
  if (source.env === null) {
    await pumpLocalFile(from, sink, meter);
  } else {
    await pumpRemoteFile(
      source.fs.createReadStream(from, {
        onDigest: (digest) => {
          remote.source = digest;
        },
      }),
      sink,
      meter,
    );
  }
  const passed = hash.digest('hex');
  const check = (where: string, actual: string, expected: string) => {
    if (actual !== expected) throw integrityError(to, where, actual, expected);
  };
  // What the source read must be what passed through here…
  const expected = remote.source?.sha256 ?? passed;
  if (remote.source) check('received', passed, expected);
  // …and what the destination holds must be that too: its executor's digest of what it wrote; for a local
  // destination fed the checked bytes of a remote source, what this process wrote; else read back.
  let atDestination: string;
  if (remote.destination) atDestination = remote.destination.sha256;
  else if (remote.source && !destination.env) atDestination = passed;
  else atDestination = await sha256Of(destination, to);
  check('at the destination', atDestination, expected);
  stats.files++;
  stats.bytes += done;
  options.onFile?.(to, done, expected);
}

/** Bytes per read of a local source: the block a remote write sends. */
const LOCAL_READ_BYTES = DEFAULT_BLOCK_SIZE;

/**
 * Streams a local file into `sink` through two buffers used in turn: one is read into while the other's
 * write is in flight, and a buffer is read into again only after its write's callback (when a write
 * stream no longer refers to a chunk). A read stream would hand out a fresh megabyte per read, which V8
 * collects with a full mark-compact every few dozen reads.
 */
async function pumpLocalFile(path: string, sink: Writable, onChunk: (chunk: Buffer) => void): Promise<void> {
  await fill(sink, async () => {
    const file = await open(path, 'r').catch((err: unknown) => {
      throw pathError(err, path);
    });
    try {
      const buffers = [Buffer.allocUnsafeSlow(LOCAL_READ_BYTES), Buffer.allocUnsafeSlow(LOCAL_READ_BYTES)];
      let writing: Promise<void> = Promise.resolve();
      for (let turn = 0, position = 0; ; turn ^= 1) {
        const { bytesRead } = await file.read(buffers[turn] as Buffer, 0, LOCAL_READ_BYTES, position);
        await writing; // the other buffer's write: its bytes are taken, it may be read into next
        if (bytesRead === 0) break;
        position += bytesRead;
        const chunk = (buffers[turn] as Buffer).subarray(0, bytesRead);
        onChunk(chunk);
        writing = write(sink, chunk);
        writing.catch(() => undefined); // awaited on the next turn; a failure there ends the loop
      }
    } finally {
      await file.close();
    }
  });
}

/**
 * Streams a remote file's chunks into `sink` and gives each back to its stream once written (`giveBack`):
 * the read stream keeps fetching ahead meanwhile, and the blocks' buffers serve the next ones.
 */
async function pumpRemoteFile(chunks: FileReadStream, sink: Writable, onChunk: (chunk: Buffer) => void): Promise<void> {
  await fill(
    sink,
    async () => {
      for await (const chunk of chunks) {
        onChunk(chunk as Buffer);
        await write(sink, chunk as Buffer);
        chunks.giveBack?.(chunk as Buffer); // the sink called back: it holds no reference to it
      }
    },
    () => chunks.destroy(),
  );
}

/**
 * Runs `produce` (which writes into `sink`), then ends `sink` and waits until it finished. On a failure
 * `sink` is destroyed (a remote handle closes), `onError` stops the producer's source, and the error
 * thrown is the sink's own when it failed first (a later write only reports that it was destroyed).
 */
async function fill(sink: Writable, produce: () => Promise<void>, onError?: () => void): Promise<void> {
  let failure: Error | null = null;
  const onSinkError = (err: Error) => {
    failure ??= err;
  };
  sink.on('error', onSinkError);
  try {
    await produce();
    sink.end();
    await finished(sink);
  } catch (err) {
    onError?.();
    sink.destroy(failure ?? (err as Error));
    await finished(sink).catch(() => undefined);
    throw failure ?? err;
  } finally {
    sink.off('error', onSinkError);
  }
}

/** Writes a chunk; resolves at its callback (the write stream is done with the chunk). */
function write(sink: Writable, chunk: Buffer): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    sink.write(chunk, (err) => (err ? reject(err) : resolve()));
  });
}

/**
 * The umask new files get at the destination: this process's here; on an environment, its shell's (`umask`
 * as the executor's children have it), else the usual 022.
 */
async function destinationUmask(destination: Endpoint): Promise<number> {
  if (destination.env === null) return process.umask();
  try {
    const { exitCode, stdout } = await destination.env.exec(['/bin/sh', '-c', 'umask']);
    const match = /^\s*(0?[0-7]{1,4})\s*$/.exec(stdout.toString());
    if (exitCode === 0 && match) return Number.parseInt(match[1] as string, 8) & 0o777;
  } catch {
    // the usual umask below
  }
  return 0o022;
}

/** `sha256sum`'s answer is one line; an executor that sends more than this is not answering it. */
export const SHA256SUM_OUTPUT_BYTES = 64 * 1024;

/**
 * `sha256sum -- path` on the environment, its stdout kept up to SHA256SUM_OUTPUT_BYTES (the process is
 * terminated past that): the digest, or undefined when it failed or did not answer as sha256sum does.
 */
async function remoteSha256(env: Environment, path: string): Promise<string | undefined> {
  const handle = await env.spawn(['sha256sum', '--', path]);
  const parts: Buffer[] = [];
  let size = 0;
  try {
    for await (const event of handle) {
      if (event.kind !== 'output' || event.stream !== 'stdout') continue;
      size += event.chunk.byteLength;
      if (size > SHA256SUM_OUTPUT_BYTES) {
        await handle.terminate().catch(() => undefined);
        return undefined;
      }
      parts.push(event.chunk);
    }
    if ((await handle.completion).exitCode !== 0) return undefined;
  } finally {
    handle.dispose();
  }
  return /^([0-9a-f]{64})\s/.exec(Buffer.concat(parts).toString())?.[1];
}

/** SHA-256 of a file where it lives: `sha256sum` on a remote environment, else read back and hashed. */
export async function sha256Of(endpoint: Endpoint, path: string): Promise<string> {
  if (endpoint.env) {
    const digest = await remoteSha256(endpoint.env, path).catch(() => undefined);
    if (digest) return digest;
  }
  const hash: Hash = createHash('sha256');
  for await (const chunk of endpoint.fs.createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}
