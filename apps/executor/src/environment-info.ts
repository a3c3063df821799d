import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { arch, homedir, platform, tmpdir } from 'node:os';
import { basename, resolve } from 'node:path';
import { type EnvironmentInfo, pathToFileUri } from '@tether/exec-protocol';

/** Tether's extensions beyond Codex, advertised so SDKs can feature-detect; Codex clients ignore them. */
export const CAPABILITIES = {
  processResize: true,
  ptySize: true,
  extendedSignals: true,
  processCloseStdin: true,
  processList: true,
  // Codex's own name for `fs/open {mode: "replace"}` + `fs/writeBlock` (it advertises it too).
  fileWriteStreaming: true,
  // Codex's: `fs/watchMissing` and its `fs/missingChanged` notification (fs/watch-missing.ts).
  fsWatchMissing: true,
  // Codex's: `process/start {shellSnapshot: {scopeId, shell}}`, a login shell's profile evaluated once per
  // scope (shell-snapshot.ts).
  shellSnapshotV2: true,
  // Codex's: `environmentConfig/read`, the Codex config layers of this machine (environment-config.ts).
  environmentConfigRead: true,
  // Codex's: `http/request` headers `{name, value, valueEnvVar}`, the value of a variable of the executor's own
  // environment appended to `value` (http/http-requests.ts), so a token never crosses the connection.
  httpHeaderEnvVars: true,
  // Codex's: `capabilities/discoverV2`, this machine's skills (capabilities/discover-skills.ts), and the
  // `sandbox` it is sent with confining the discovery as it confines fs/* calls.
  capabilityDiscoveryV2: true,
  capabilityDiscoverySandbox: true,
  // Tether: `fs/open {mode: "update"}` (write without truncating, to resume an upload).
  fileWriteUpdate: true,
  // Tether: `fs/open {mode: "overwrite"}` (write in place, cut to length at close, as scp does).
  fileWriteOverwrite: true,
  // Tether: `fs/close {digest: true}` answers the SHA-256 of the bytes read or written through the handle.
  fileHandleDigest: true,
  // Tether: `fs/readFiles` and `fs/writeFiles`, many small files per request, each with its own SHA-256.
  fileBatch: true,
  // Tether: `fs/getMetadata {unix: true}` (adds mode, accessedAtMs) and `fs/setMetadata` (for cp -p).
  fileMetadata: true,
  // Tether: `fs/readDirectory {links: true}` marks symbolic links (`isSymlink`) and lists dangling ones (cp -r).
  directoryLinks: true,
  // Tether: `process/start {flowControl: {windowBytes}}` + the `process/ack` notification (credit-based,
  // lossless output: the child blocks instead of output being dropped; exec-protocol's flow-control.ts).
  flowControl: true,
  // Tether: `tcp/connect` + `tcp/*` notifications, forwarded TCP connections (exec-protocol's tcp.ts).
  tcpForward: true,
  // Tether: `process/start {detached: true}`, `process/attach`, detached ids everywhere (exec-protocol's detached.ts).
  processDetach: true,
  processShare: true,
  // (Codex's `sandboxedFileStreaming`, `fs/open` + `fs/readBlock`/`fs/writeBlock` confined by a `sandbox`, is
  // added by the server with `processSandbox`: it needs bubblewrap, and the descriptor passing of
  // @tether/native-pipe, to work here (fs/confined.ts); where they do not, a confined `fs/open` is refused.)
  // (`binaryBlocks`, raw bytes instead of base64 in fs/readBlock and fs/writeBlock, is added per connection
  // where the transport carries binary attachments: connection-processor.ts.)
} as const;

export const EXECUTOR_VERSION = '0.1.0';

/**
 * `environmentInfo.executorVersion`: the Codex exec-server release whose protocol this executor speaks. Codex's
 * agent gates features on it, not only on `capabilities`: 0.171.0's asks `capabilities/discoverV2` (and so gives
 * the model the executor's skills) only from an executor of 0.164.0 or later (probed: 0.163.0 no, 0.164.0 yes).
 * Our own release is EXECUTOR_VERSION (telemetry, providerId).
 */
export const CODEX_PROTOCOL_VERSION = '0.171.0';

function detectShell(env: NodeJS.ProcessEnv): { name: string; path: string } {
  const candidates = [env.SHELL, '/bin/bash', '/bin/sh'].filter((p): p is string => Boolean(p));
  const path = candidates.find((candidate) => existsSync(candidate)) ?? '/bin/sh';
  return { name: basename(path), path };
}

/**
 * Codex's `providerId` is the same for every run of one build (CODEX-FINDINGS.md §18): ours is the SHA-256
 * of the executor's name, version and platform, so it changes with the build and nothing else.
 */
export function providerId(): string {
  const digest = createHash('sha256').update(`tether-executor/${EXECUTOR_VERSION}/${platform()}-${arch()}`);
  return `sha256:${digest.digest('hex')}`;
}

export interface EnvironmentInfoOptions {
  /** `[environment] prepend_path_dirs`: absolute directories; none leaves `prependPathDirs` out, as Codex does. */
  prependPathDirs?: readonly string[];
}

/** Computed once per server: none of it changes while the executor runs. */
export function environmentInfo(
  env: NodeJS.ProcessEnv = process.env,
  options: EnvironmentInfoOptions = {},
): EnvironmentInfo {
  const prepend = options.prependPathDirs ?? [];
  return {
    shell: detectShell(env),
    cwd: pathToFileUri(process.cwd()),
    executorVersion: CODEX_PROTOCOL_VERSION,
    userHomeDir: pathToFileUri(homedir()),
    platformOs: platform(),
    tempDir: pathToFileUri(tmpdir()),
    providerId: providerId(),
    ...(prepend.length > 0 ? { prependPathDirs: prepend.map((dir) => pathToFileUri(dir)) } : {}),
    // As Codex: TMPDIR as given (resolved against the cwd, not checked), else none.
    temporaryDirectories: env.TMPDIR ? [pathToFileUri(resolve(env.TMPDIR))] : [],
    capabilities: { ...CAPABILITIES },
  };
}
