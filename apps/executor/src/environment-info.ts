import { existsSync } from 'node:fs';
import { homedir, platform, tmpdir } from 'node:os';
import { basename } from 'node:path';
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
  // Tether: `process/start {flowControl: {windowBytes}}` + the `process/ack` notification (credit-based,
  // lossless output: the child blocks instead of output being dropped; exec-protocol's flow-control.ts).
  flowControl: true,
  // Tether: `tcp/connect` + `tcp/*` notifications, forwarded TCP connections (exec-protocol's tcp.ts).
  tcpForward: true,
  // Tether: `process/start {detached: true}`, `process/attach`, detached ids everywhere (exec-protocol's detached.ts).
  processDetach: true,
  // (`binaryBlocks`, raw bytes instead of base64 in fs/readBlock and fs/writeBlock, is added per connection
  // where the transport carries binary attachments: connection-processor.ts.)
} as const;

export const EXECUTOR_VERSION = '0.1.0';

function detectShell(env: NodeJS.ProcessEnv): { name: string; path: string } {
  const candidates = [env.SHELL, '/bin/bash', '/bin/sh'].filter((p): p is string => Boolean(p));
  const path = candidates.find((candidate) => existsSync(candidate)) ?? '/bin/sh';
  return { name: basename(path), path };
}

/** Computed once per server: none of it changes while the executor runs. */
export function environmentInfo(env: NodeJS.ProcessEnv = process.env): EnvironmentInfo {
  return {
    shell: detectShell(env),
    cwd: pathToFileUri(process.cwd()),
    executorVersion: EXECUTOR_VERSION,
    userHomeDir: pathToFileUri(homedir()),
    platformOs: platform(),
    tempDir: pathToFileUri(tmpdir()),
    capabilities: { ...CAPABILITIES },
  };
}
