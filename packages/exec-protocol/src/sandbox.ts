/**
 * The `sandbox` parameter of `process/start` and every `fs/*` method (Codex's
 * `FileSystemSandboxContext`), decoded with serde's wording for the shapes Codex rejects. Paths stay as
 * the client sent them (file URIs); resolving them against the host is the executor's (@tether/sandbox).
 */
import { DecodeError } from './decode.js';

export type NetworkAccess = 'restricted' | 'enabled';
export type FileAccess = 'read' | 'write' | 'deny';
export type SpecialPathKind = 'root' | 'minimal' | 'project_roots' | 'tmpdir' | 'slash_tmp' | 'unknown';

/** Where an entry applies: an absolute path (a file URI), a glob (deny only), or a path the executor knows. */
export type SandboxPath =
  | { type: 'path'; path: string }
  /** Only a `deny` glob means something (Codex ignores the others). */
  | { type: 'glob_pattern'; pattern: string }
  | { type: 'special'; kind: SpecialPathKind; subpath: string | null };

export interface SandboxEntry {
  path: SandboxPath;
  access: FileAccess;
  /** `missing_path_behavior: "skip"`: a missing path is left out instead of protected. */
  skipMissing: boolean;
}

export type SandboxPermissions =
  | {
      type: 'managed';
      fileSystem:
        | { type: 'restricted'; entries: SandboxEntry[]; globScanMaxDepth?: number | null }
        | { type: 'unrestricted' };
      network: NetworkAccess;
    }
  | { type: 'disabled' }
  | { type: 'external'; network: NetworkAccess };

export interface SandboxContext {
  permissions: SandboxPermissions;
  /** The directory the policy is read against (a file URI), when given. */
  cwd: string | null;
  /** What `project_roots` means (file URIs); none given, it means nothing. */
  workspaceRoots: string[];
  /** What `tmpdir` means when the client says (file URIs); else the process's `TMPDIR`. */
  temporaryDirectories: string[] | null;
}

/**
 * What a `sandbox` value asks of a filesystem call: `none` (absent or null), `unrestricted` (a
 * profile that does not restrict the filesystem: `disabled`, `external`, or `managed` with
 * `file_system: unrestricted`), or `restricted` (a managed profile with filesystem entries).
 */
export type SandboxRequest = 'none' | 'unrestricted' | 'restricted';

const WINDOWS_SANDBOX_LEVELS = ['disabled', 'restricted-token', 'elevated', 'mxc'];
const PROXY_SETTINGS_MODES = ['reconcile', 'preserve'];
const NETWORK = ['restricted', 'enabled'];
const ACCESS = ['read', 'write', 'deny', 'none'];
const PATH_TYPES = ['path', 'glob_pattern', 'special'];
const SPECIAL_KINDS = [
  'root',
  'minimal',
  'project_roots',
  'current_working_directory',
  'tmpdir',
  'slash_tmp',
  'unknown',
];

function typeName(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'boolean') return `boolean \`${value}\``;
  if (typeof value === 'number')
    return Number.isInteger(value) ? `integer \`${value}\`` : `floating point \`${value}\``;
  if (typeof value === 'string') return `string ${JSON.stringify(value)}`;
  if (Array.isArray(value)) return 'sequence';
  return 'map';
}

function isMap(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function variant(value: unknown, options: string[], expected: string): string {
  if (typeof value !== 'string') throw new DecodeError(`invalid type: ${typeName(value)}, expected ${expected}`);
  if (!options.includes(value)) {
    const list =
      options.length === 2
        ? `\`${options[0]}\` or \`${options[1]}\``
        : `one of ${options.map((o) => `\`${o}\``).join(', ')}`;
    throw new DecodeError(`unknown variant \`${value}\`, expected ${list}`);
  }
  return value;
}

function field(map: Record<string, unknown>, name: string): unknown {
  if (!(name in map)) throw new DecodeError(`missing field \`${name}\``);
  return map[name];
}

function map(value: unknown, expected: string): Record<string, unknown> {
  if (!isMap(value)) throw new DecodeError(`invalid type: ${typeName(value)}, expected ${expected}`);
  return value;
}

function string(value: unknown): string {
  if (typeof value !== 'string') throw new DecodeError(`invalid type: ${typeName(value)}, expected a string`);
  return value;
}

function optionalString(value: unknown): string | null {
  return value === undefined || value === null ? null : string(value);
}

function strings(value: unknown): string[] {
  if (!Array.isArray(value)) throw new DecodeError(`invalid type: ${typeName(value)}, expected a sequence`);
  return value.map(string);
}

function entryPath(value: unknown): SandboxPath {
  const path = map(value, 'internally tagged enum ExecFileSystemPath');
  const type = variant(field(path, 'type'), PATH_TYPES, 'a string') as SandboxPath['type'];
  if (type === 'path') return { type, path: string(field(path, 'path')) };
  if (type === 'glob_pattern') return { type, pattern: string(field(path, 'pattern')) };
  const special = map(field(path, 'value'), 'internally tagged enum FileSystemSpecialPath');
  const kind = variant(field(special, 'kind'), SPECIAL_KINDS, 'a string');
  return {
    type,
    // An alias Codex accepts and never sends.
    kind: (kind === 'current_working_directory' ? 'project_roots' : kind) as SpecialPathKind,
    subpath: optionalString(special.subpath),
  };
}

function entry(value: unknown): SandboxEntry {
  const raw = map(value, 'struct ExecFileSystemSandboxEntry');
  const path = entryPath(field(raw, 'path'));
  const access = variant(field(raw, 'access'), ACCESS, 'a string');
  const missing = raw.missing_path_behavior;
  const skipMissing =
    missing === undefined || missing === null ? false : variant(missing, ['skip'], 'a string') === 'skip';
  const decoded: SandboxEntry = { path, access: access === 'none' ? 'deny' : (access as FileAccess), skipMissing };
  return decoded;
}

/** The whole `sandbox` value, or null when absent. Throws DecodeError with serde's words. */
export function decodeSandboxContext(value: unknown): SandboxContext | null {
  if (value === undefined || value === null) return null;
  const context = map(value, 'struct WireFileSystemSandboxContext');
  const permissions = map(field(context, 'permissions'), 'internally tagged enum ExecPermissionProfile');
  const kind = variant(field(permissions, 'type'), ['managed', 'disabled', 'external'], 'a string');
  let decoded: SandboxPermissions;
  if (kind === 'managed') {
    const fileSystem = map(
      field(permissions, 'file_system'),
      'internally tagged enum ExecManagedFileSystemPermissions',
    );
    const fsKind = variant(field(fileSystem, 'type'), ['restricted', 'unrestricted'], 'a string');
    let fs: Extract<SandboxPermissions, { type: 'managed' }>['fileSystem'] = { type: 'unrestricted' };
    if (fsKind === 'restricted') {
      const entries = field(fileSystem, 'entries');
      if (!Array.isArray(entries)) throw new DecodeError(`invalid type: ${typeName(entries)}, expected a sequence`);
      const depth = fileSystem.glob_scan_max_depth;
      fs = {
        type: 'restricted',
        entries: entries.map(entry),
        globScanMaxDepth: typeof depth === 'number' && Number.isSafeInteger(depth) && depth >= 1 ? depth : null,
      };
    }
    const network = variant(field(permissions, 'network'), NETWORK, 'a string') as NetworkAccess;
    decoded = { type: 'managed', fileSystem: fs, network };
  } else if (kind === 'external') {
    decoded = {
      type: 'external',
      network: variant(field(permissions, 'network'), NETWORK, 'a string') as NetworkAccess,
    };
  } else {
    decoded = { type: 'disabled' };
  }
  variant(field(context, 'windowsSandboxLevel'), WINDOWS_SANDBOX_LEVELS, 'a string');
  const proxyMode = context.windowsSandboxProxySettingsMode;
  if (proxyMode !== undefined && proxyMode !== null) variant(proxyMode, PROXY_SETTINGS_MODES, 'a string');
  const roots = context.workspaceRoots;
  const temporary = context.temporaryDirectories;
  return {
    permissions: decoded,
    cwd: optionalString(context.cwd),
    workspaceRoots: roots === undefined || roots === null ? [] : strings(roots),
    temporaryDirectories: temporary === undefined || temporary === null ? null : strings(temporary),
  };
}

/**
 * Whether the filesystem is confined: a managed profile with entries, unless one of them writes the whole
 * disk (`root` with `write` and nothing narrower), which Codex runs unconfined as well.
 */
export function restrictsFileSystem(context: SandboxContext | null): boolean {
  if (context === null || context.permissions.type !== 'managed') return false;
  const fs = context.permissions.fileSystem;
  if (fs.type !== 'restricted') return false;
  const rootWrite = fs.entries.some(
    (e) => e.path.type === 'special' && e.path.kind === 'root' && e.path.subpath === null && e.access === 'write',
  );
  const narrower = fs.entries.some(
    (e) => e.access !== 'write' && !(e.path.type === 'special' && e.path.kind === 'root' && e.path.subpath === null),
  );
  return !rootWrite || narrower;
}

/** The network a context allows: an absent context, or `disabled`, allows it. */
export function sandboxNetwork(context: SandboxContext | null): NetworkAccess {
  if (context === null || context.permissions.type === 'disabled') return 'enabled';
  return context.permissions.network;
}

/** Classifies a `sandbox` parameter (see SandboxRequest); throws DecodeError for a malformed one. */
export function parseSandbox(value: unknown): SandboxRequest {
  const context = decodeSandboxContext(value);
  if (context === null) return 'none';
  return restrictsFileSystem(context) ? 'restricted' : 'unrestricted';
}
