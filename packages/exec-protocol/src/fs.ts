/**
 * `fs/*` params and results (spec §3.9), shaped after what the Codex 0.171.0 binary accepts (see
 * tests/conformance/CODEX-FINDINGS.md §15). Paths are `file:` URIs. Types derive from the schemas.
 */
import { type Static, Type } from '@sinclair/typebox';
import { Literals, Nullable, U64 } from './schema-parts.js';

/** Validated by `parseSandbox`, which words its errors as serde does for Codex's tagged enums. */
const Sandbox = Type.Optional(Type.Unknown());

export const FsReadFileParams = Type.Object({
  path: Type.String(),
  sandbox: Sandbox,
  /** Refuse files larger than this (the server's own limit applies as well). Codex 0.171.0 ignores it. */
  maxBytes: Type.Optional(Nullable(U64)),
});
export type FsReadFileParams = Static<typeof FsReadFileParams>;
export const FsReadFileResult = Type.Object({ dataBase64: Type.String() });
export type FsReadFileResult = Static<typeof FsReadFileResult>;

export const FsWriteFileParams = Type.Object({ path: Type.String(), dataBase64: Type.String(), sandbox: Sandbox });
export type FsWriteFileParams = Static<typeof FsWriteFileParams>;

export const FsCreateDirectoryParams = Type.Object({
  path: Type.String(),
  recursive: Type.Optional(Nullable(Type.Boolean())),
  sandbox: Sandbox,
});
export type FsCreateDirectoryParams = Static<typeof FsCreateDirectoryParams>;

export const FsPathParams = Type.Object({ path: Type.String(), sandbox: Sandbox });
export type FsPathParams = Static<typeof FsPathParams>;

export const FsMetadata = Type.Object({
  isDirectory: Type.Boolean(),
  isFile: Type.Boolean(),
  isSymlink: Type.Boolean(),
  size: U64,
  createdAtMs: Type.Integer(),
  modifiedAtMs: Type.Integer(),
});
export type FsMetadata = Static<typeof FsMetadata>;

export const FsCanonicalizeResult = Type.Object({ path: Type.String() });

export const FsDirectoryEntry = Type.Object({
  fileName: Type.String(),
  isDirectory: Type.Boolean(),
  isFile: Type.Boolean(),
  /** Tether (`directoryLinks`, asked with `links: true`): the entry is a symbolic link (its kinds: the target's). */
  isSymlink: Type.Optional(Type.Boolean()),
});

/**
 * `fs/readDirectory`: Codex's `{path}`. Tether's `links: true` (capability `directoryLinks`) marks each
 * symbolic link with `isSymlink` and lists dangling ones too (neither file nor directory), so that a copy can
 * say which entries are links instead of taking them for what they point to.
 */
export const FsReadDirectoryParams = Type.Object({
  path: Type.String(),
  sandbox: Sandbox,
  links: Type.Optional(Type.Boolean()),
});
export type FsReadDirectoryParams = Static<typeof FsReadDirectoryParams>;
/** The capability of `fs/readDirectory {links: true}`. */
export const DIRECTORY_LINKS_CAPABILITY = 'directoryLinks';
export type FsDirectoryEntry = Static<typeof FsDirectoryEntry>;
export const FsReadDirectoryResult = Type.Object({ entries: Type.Array(FsDirectoryEntry) });

export const FsRemoveParams = Type.Object({
  path: Type.String(),
  recursive: Type.Optional(Nullable(Type.Boolean())),
  force: Type.Optional(Nullable(Type.Boolean())),
  sandbox: Sandbox,
});
export type FsRemoveParams = Static<typeof FsRemoveParams>;

export const FsCopyParams = Type.Object({
  sourcePath: Type.String(),
  destinationPath: Type.String(),
  recursive: Type.Boolean(),
  sandbox: Sandbox,
});
export type FsCopyParams = Static<typeof FsCopyParams>;

/**
 * `read` (default) opens for `fs/readBlock`; `replace` creates or truncates for `fs/writeBlock` (both
 * Codex's). Tether extensions: `update` (capability `fileWriteUpdate`): create if absent, keep the
 * existing bytes, write positionally — how a client resumes an upload its lost connection cut short.
 * `overwrite` (capability `fileWriteOverwrite`): create if absent and write in place, as scp does; the
 * file is cut at the furthest byte written when the handle closes (or its connection ends), so it ends
 * as `replace` would leave it without first freeing the pages of the old contents.
 */
export const FsOpenMode = Literals('read', 'replace', 'update', 'overwrite');
export type FsOpenMode = Static<typeof FsOpenMode>;

export const FsOpenParams = Type.Object({
  handleId: Type.String(),
  path: Type.String(),
  mode: Type.Optional(Nullable(FsOpenMode)),
  sandbox: Sandbox,
  /** Tether (`fileHandleDigest`): hash the bytes read or written; `fs/close` then answers the SHA-256. */
  digest: Type.Optional(Type.Boolean()),
});
export type FsOpenParams = Static<typeof FsOpenParams>;
export const FsOpenResult = Type.Object({ handleId: Type.String() });

export const FsReadBlockParams = Type.Object({
  handleId: Type.String(),
  offset: U64,
  len: U64,
  /** Tether (`binaryBlocks`): answer with the bytes as a binary attachment instead of base64 `chunk`. */
  binary: Type.Optional(Type.Boolean()),
});
export type FsReadBlockParams = Static<typeof FsReadBlockParams>;
export const FsReadBlockResult = Type.Object({ chunk: Type.String(), eof: Type.Boolean() });
export type FsReadBlockResult = Static<typeof FsReadBlockResult>;

export const FsWriteBlockParams = Type.Object({ handleId: Type.String(), offset: U64, chunk: Type.String() });
export type FsWriteBlockParams = Static<typeof FsWriteBlockParams>;
/** Tether (`binaryBlocks`): `fs/writeBlock` whose bytes are the message's binary attachment. */
export const FsWriteBlockBinaryParams = Type.Object({ handleId: Type.String(), offset: U64 });
export type FsWriteBlockBinaryParams = Static<typeof FsWriteBlockBinaryParams>;

export const FsCloseParams = Type.Object({ handleId: Type.String() });
export type FsCloseParams = Static<typeof FsCloseParams>;

const Usize = Type.Integer({ minimum: 0, serde: 'usize' });
export const FsWalkOptions = Type.Object(
  {
    maxDepth: Usize,
    maxDirectories: Usize,
    maxEntries: Usize,
    followDirectorySymlinks: Type.Boolean(),
  },
  { serde: 'WalkOptions' },
);
export type FsWalkOptions = Static<typeof FsWalkOptions>;
export const FsWalkParams = Type.Object({ path: Type.String(), options: FsWalkOptions, sandbox: Sandbox });
export type FsWalkParams = Static<typeof FsWalkParams>;

export const FsWalkEntry = Type.Object({
  path: Type.String(),
  kind: Literals('file', 'directory'),
});
export type FsWalkEntry = Static<typeof FsWalkEntry>;
export const FsWalkResult = Type.Object({
  entries: Type.Array(FsWalkEntry),
  errors: Type.Array(Type.Object({ path: Type.String(), message: Type.String() })),
  truncated: Type.Boolean(),
});
export type FsWalkResult = Static<typeof FsWalkResult>;

// Tether extensions for many small files and for metadata ------------------------------------------

/**
 * Tether's `fs/*` extensions: `fs/readFiles` and `fs/writeFiles` (capability `fileBatch`: many small
 * files in one request each, every file with its own SHA-256), `fs/setMetadata` and `fs/getMetadata
 * {unix: true}` (capability `fileMetadata`: permission bits and times, for `cp -p`). Codex has none of
 * them; clients feature-detect the capability and keep to Codex's methods without it.
 */
export const FsExtensionMethod = {
  readFiles: 'fs/readFiles',
  writeFiles: 'fs/writeFiles',
  setMetadata: 'fs/setMetadata',
} as const;

/** Files one `fs/readFiles` or `fs/writeFiles` request may name. */
export const MAX_BATCH_FILES = 1024;
/** Bytes of file data one `fs/readFiles` answer or `fs/writeFiles` request may carry (before base64). */
export const MAX_BATCH_BYTES = 8 * 1024 * 1024;
/** Permission bits `fs/setMetadata` and `fs/writeFiles` set, and `fs/getMetadata {unix}` answers. */
export const MODE_BITS = 0o7777;

const Mode = Type.Integer({ minimum: 0, maximum: MODE_BITS });
const TimeMs = Type.Integer({ minimum: -8_640_000_000_000_000, maximum: 8_640_000_000_000_000 });

/** `fs/getMetadata` with Tether's `unix: true` (`fileMetadata`): the answer adds `mode` and `accessedAtMs`. */
export const FsGetMetadataParams = Type.Object({
  path: Type.String(),
  sandbox: Sandbox,
  unix: Type.Optional(Type.Boolean()),
});
export type FsGetMetadataParams = Static<typeof FsGetMetadataParams>;
export const FsUnixMetadata = Type.Object({ mode: Mode, modifiedAtMs: TimeMs, accessedAtMs: TimeMs });
export type FsUnixMetadata = Static<typeof FsUnixMetadata>;
/** `fs/getMetadata`'s answer: Codex's fields, and with `unix: true` (`fileMetadata`) the mode and access time. */
export const FsGetMetadataResult = Type.Object({
  ...FsMetadata.properties,
  mode: Type.Optional(Mode),
  accessedAtMs: Type.Optional(TimeMs),
});
export type FsGetMetadataResult = Static<typeof FsGetMetadataResult>;

/**
 * `fs/setMetadata` (`fileMetadata`): sets what is given of a path's permission bits (chmod) and times
 * (both or neither: utimes); links are followed, as chmod does.
 */
export const FsSetMetadataParams = Type.Object({
  path: Type.String(),
  mode: Type.Optional(Mode),
  modifiedAtMs: Type.Optional(TimeMs),
  accessedAtMs: Type.Optional(TimeMs),
  sandbox: Sandbox,
});
export type FsSetMetadataParams = Static<typeof FsSetMetadataParams>;

/**
 * `fs/readFiles` (`fileBatch`): reads whole regular files, in order, each at most `maxFileBytes`, together
 * at most `maxTotalBytes` (the server caps both at MAX_BATCH_BYTES). Each answer entry is one of: the
 * bytes with their SHA-256, permission bits and times; `tooLarge` with the size (read it with `fs/open`);
 * `deferred` (it did not fit in what was left of `maxTotalBytes`: ask again); or an `error` as the
 * single-file method would answer it.
 */
export const FsReadFilesParams = Type.Object({
  paths: Type.Array(Type.String(), { maxItems: MAX_BATCH_FILES }),
  maxFileBytes: U64,
  maxTotalBytes: U64,
  sandbox: Sandbox,
});
export type FsReadFilesParams = Static<typeof FsReadFilesParams>;
export const FsBatchError = Type.Object({ code: Type.Integer(), message: Type.String() });
export type FsBatchError = Static<typeof FsBatchError>;
const Sha256Hex = Type.String({ pattern: '^[0-9a-f]{64}$' });
export const FsReadFilesEntry = Type.Union([
  Type.Object({ dataBase64: Type.String(), sha256: Sha256Hex, mode: Mode, modifiedAtMs: TimeMs, accessedAtMs: TimeMs }),
  Type.Object({ tooLarge: Type.Literal(true), size: U64 }),
  Type.Object({ deferred: Type.Literal(true) }),
  Type.Object({ error: FsBatchError }),
]);
export type FsReadFilesEntry = Static<typeof FsReadFilesEntry>;
export const FsReadFilesResult = Type.Object({ files: Type.Array(FsReadFilesEntry) });
export type FsReadFilesResult = Static<typeof FsReadFilesResult>;

/**
 * `fs/writeFiles` (`fileBatch`): creates or truncates and writes each file whole, in order, then sets the
 * permission bits and times given (through the open file). Each answer entry is the SHA-256 and length of
 * the bytes written, or an `error` (later files are still written).
 */
export const FsWriteFilesParams = Type.Object({
  files: Type.Array(
    Type.Object({
      path: Type.String(),
      dataBase64: Type.String(),
      mode: Type.Optional(Mode),
      modifiedAtMs: Type.Optional(TimeMs),
      accessedAtMs: Type.Optional(TimeMs),
    }),
    { maxItems: MAX_BATCH_FILES },
  ),
  sandbox: Sandbox,
});
export type FsWriteFilesParams = Static<typeof FsWriteFilesParams>;
export const FsWriteFilesEntry = Type.Union([
  Type.Object({ sha256: Sha256Hex, bytes: U64 }),
  Type.Object({ error: FsBatchError }),
]);
export type FsWriteFilesEntry = Static<typeof FsWriteFilesEntry>;
export const FsWriteFilesResult = Type.Object({ files: Type.Array(FsWriteFilesEntry) });
export type FsWriteFilesResult = Static<typeof FsWriteFilesResult>;

/**
 * `fs/watchMissing` (Codex 0.171.0, capability `fsWatchMissing`; CODEX-FINDINGS.md §18): wait for any of
 * `missing` to appear, or for `present` to go. One watch per connection: a higher `watchId` replaces it, a
 * lower or equal one changes nothing. It fires once, as `fs/missingChanged {watchId}`.
 */
export const FsWatchMissingParams = Type.Object({
  watchId: U64,
  missing: Type.Array(Type.String()),
  present: Type.Optional(Type.Union([Type.String(), Type.Null()])),
});
export type FsWatchMissingParams = Static<typeof FsWatchMissingParams>;
export const FsWatchMissingResult = Type.Object({ watching: Type.Boolean() });
export type FsWatchMissingResult = Static<typeof FsWatchMissingResult>;
export const FsMissingChangedNotification = Type.Object({ watchId: U64 });
