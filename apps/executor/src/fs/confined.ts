/**
 * `fs/*` under a restricted sandbox, as Codex runs them: in a helper process (sandbox-helper.ts) inside the
 * same bubblewrap policy a process would get, with the network always cut. The helper answers as the direct
 * call would, so a denied write is `Read-only file system`, an invisible path `No such file or directory`.
 * One helper per call; a call that fails to prepare is -32600, a helper that dies is -32603. `fs/open` is
 * opened by the helper, which hands the open file back over a socket (SCM_RIGHTS, as Codex's does): the
 * executor never opens the path, so nothing swapped in after the sandbox's check is ever opened, and the
 * handle stays on that file for its whole life.
 */
import { spawn } from 'node:child_process';
import { closeSync, existsSync, openSync, realpathSync } from 'node:fs';
import { dirname, join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  ErrorCode,
  type FsOpenMode,
  fileUriToPath,
  RpcError,
  restrictsFileSystem,
  type SandboxContext,
} from '@tether/exec-protocol';
import { type ChildLedger, noteChildProcess } from '@tether/local-process';
import { loadNativePipe, type NativePipe, nativePipeUnavailableReason } from '@tether/native-pipe';
import { PLATFORM_READ_ROOTS, type Sandboxer } from '@tether/sandbox';
import { decodeSandbox, prepareSandbox } from '../sandbox-context.js';
import { type ConfinedOp, type ConfinedOps, PASS_FD } from './confined-ops.js';

/** The helper's script: the built file beside this one (or, running from source, the package's dist). */
function helperScript(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  const beside = join(here, 'sandbox-helper.js');
  if (existsSync(beside)) return beside;
  return join(here, '..', '..', 'dist', 'fs', 'sandbox-helper.js');
}

function commonAncestor(paths: string[]): string {
  let common = paths[0]!.split(sep);
  for (const path of paths.slice(1)) {
    const parts = path.split(sep);
    let i = 0;
    while (i < common.length && i < parts.length && common[i] === parts[i]) i++;
    common = common.slice(0, i);
  }
  return common.join(sep) || sep;
}

/**
 * What the helper needs to read when the policy does not let it read the disk: node, the system libraries
 * (Codex's `minimal`), and the executor's installed code (its package and the ones it loads).
 */
export function helperRuntime(): string[] {
  // The same for every call of this process's life (its install does not move): found once.
  runtime ??= findHelperRuntime();
  return runtime;
}
let runtime: string[] | null = null;

function findHelperRuntime(): string[] {
  const script = helperScript();
  const code = [
    realpathSync(dirname(script)),
    // The packages it loads sit under the same root (the workspace, or a deployed app's directory).
    realpathSync(dirname(fileURLToPath(import.meta.resolve('@tether/exec-protocol')))),
    // The addon `open` passes its file back with (native/, beside its dist/).
    realpathSync(join(dirname(fileURLToPath(import.meta.resolve('@tether/native-pipe'))), '..')),
  ];
  return [realpathSync(process.execPath), commonAncestor(code), ...PLATFORM_READ_ROOTS];
}

/** Decodes a call's `sandbox`; answers it when the call must run confined, null when it runs directly. */
export function confinement(raw: unknown): SandboxContext | null {
  const context = decodeSandbox(raw);
  return restrictsFileSystem(context) ? context : null;
}

/**
 * Checks the sandbox's cwd (a file URI), which the policy's cwd-relative entries resolve against. The helper
 * itself runs in `/` (it is given absolute paths), as Codex's does: a policy that does not make the cwd
 * readable must not fail the call.
 */
function checkSandboxCwd(context: SandboxContext): void {
  if (context.cwd === null) {
    // As Codex: entries read against a directory need one.
    const permissions = context.permissions;
    const dynamic =
      permissions.type === 'managed' &&
      permissions.fileSystem.type === 'restricted' &&
      permissions.fileSystem.entries.some(
        (e) => e.path.type === 'glob_pattern' || (e.path.type === 'special' && e.path.kind === 'project_roots'),
      );
    if (dynamic) throw RpcError.invalidParams('file system sandbox context with dynamic permissions requires cwd');
    return;
  }
  try {
    fileUriToPath(context.cwd);
  } catch (err) {
    throw RpcError.invalidRequest(`invalid sandbox cwd: ${(err as Error).message}`);
  }
}

type ConfinedContext = { sandbox: Sandboxer; adopter: ChildLedger | null; signal?: AbortSignal | undefined };

/** Runs `op` in the helper under `context`; resolves with its answer or rejects with its RpcError. */
export async function runConfined<K extends ConfinedOp>(
  ctx: ConfinedContext,
  context: SandboxContext,
  op: K,
  args: ConfinedOps[K],
): Promise<unknown> {
  return (await runHelper(ctx, context, op, args, null)).answer;
}

/**
 * Whether this executor can stream files under a restricted sandbox (`sandboxedFileStreaming`): bubblewrap
 * works here (`sandbox`) and the descriptor passing `openConfined` needs is built.
 */
export function confinedOpenAvailable(sandbox: Sandboxer): boolean {
  return sandbox.status.available && loadNativePipe() !== null;
}

/**
 * `fs/open` of `path` in `mode` under `context`: the helper opens it (and for `replace` truncates it) inside the
 * sandbox and sends the open file back. Resolves with that descriptor, now the caller's to close.
 */
export async function openConfined(
  ctx: ConfinedContext,
  context: SandboxContext,
  path: string,
  mode: FsOpenMode,
): Promise<number> {
  const native = loadNativePipe();
  if (native === null) {
    throw RpcError.invalidRequest(
      `fs/open cannot be confined on this executor: passing the sandbox's descriptor needs @tether/native-pipe (${nativePipeUnavailableReason()})`,
    );
  }
  const { received } = await runHelper(ctx, context, 'open', { path, mode }, native);
  if (received === null) throw RpcError.internal('the fs sandbox helper answered fs/open without its descriptor');
  return received;
}

/**
 * One helper run. With `passing`, the helper gets one end of a socket pair as `PASS_FD`; what it sent there is
 * taken once it has exited (`received`, the caller's), and anything that came with a failed run is closed.
 */
async function runHelper<K extends ConfinedOp>(
  ctx: ConfinedContext,
  context: SandboxContext,
  op: K,
  args: ConfinedOps[K],
  passing: NativePipe | null,
): Promise<{ answer: unknown; received: number | null }> {
  const { sandbox, signal } = ctx;
  checkSandboxCwd(context);
  const prepared = await prepareSandbox(
    sandbox,
    context,
    { cwd: '/', tmpdir: process.env.TMPDIR, forceNetworkRestricted: true, extraReadable: helperRuntime() },
    'filesystem sandbox',
    RpcError.invalidRequest,
  );
  let fd3: number | null = null;
  // The pair `passing` makes: our end, and the helper's until it is handed over.
  let mine: number | null = null;
  let theirs: number | null = null;
  let received: number | null = null;
  try {
    // The connection may have gone while the policy's walks ran: start nothing for it (as spawn would, killing it).
    signal?.throwIfAborted();
    if (prepared.prefix === null) throw RpcError.internal('a restricted filesystem sandbox came without a command');
    const { file, args: prefix } = prepared.prefix;
    const env: Record<string, string> = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
    for (const name of ['TMPDIR', 'TMP', 'TEMP']) if (process.env[name]) env[name] = process.env[name]!;
    if (prepared.seccompFile !== null) fd3 = openSync(prepared.seccompFile, 'r');
    if (passing !== null) [mine, theirs] = passing.socketPair();
    const stdio: Array<'pipe' | 'ignore' | number> = ['pipe', 'pipe', 'pipe', fd3 ?? 'ignore'];
    if (theirs !== null) stdio[PASS_FD] = theirs;
    const child = spawn(file, [...prefix, process.execPath, helperScript()], {
      cwd: '/',
      env,
      stdio,
      ...(signal ? { signal } : {}),
    });
    noteChildProcess(ctx.adopter, child); // the executor's own, not an orphan to adopt
    // The child has its copies: ours go now, so the helper's end closes when the helper does.
    if (fd3 !== null) closeSync(fd3);
    fd3 = null;
    if (theirs !== null) closeSync(theirs);
    theirs = null;
    const out: Buffer[] = [];
    let err = '';
    child.stdout!.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr!.on('data', (chunk: Buffer) => {
      if (err.length < 4096) err += chunk.toString();
    });
    child.stdin!.on('error', () => undefined);
    child.stdin!.end(JSON.stringify({ op, args }));
    const status = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve, reject) => {
      child.once('error', reject);
      child.once('close', (code, sig) => resolve({ code, signal: sig }));
    });
    if (passing !== null && mine !== null) received = passing.receiveFd(mine);
    const text = Buffer.concat(out).toString('utf8').trim();
    if (status.code !== 0 || text === '') {
      const how = status.signal !== null ? `signal: ${status.signal}` : `exit status: ${status.code}`;
      throw RpcError.internal(`fs sandbox helper failed with status ${how}: ${err.trim()}`);
    }
    let answer: { ok?: unknown; error?: { code: number; message: string; data?: unknown } };
    try {
      answer = JSON.parse(text);
    } catch (cause) {
      throw RpcError.internal(`failed to encode or decode fs sandbox helper message: ${(cause as Error).message}`);
    }
    if (answer.error) {
      const code = Number.isInteger(answer.error.code) ? answer.error.code : ErrorCode.internal;
      throw new RpcError(code, String(answer.error.message), answer.error.data);
    }
    const result = { answer: answer.ok, received };
    received = null; // the caller's now
    return result;
  } finally {
    if (fd3 !== null) closeSync(fd3);
    if (mine !== null) closeSync(mine);
    if (theirs !== null) closeSync(theirs);
    if (received !== null) closeSync(received);
    prepared.release();
  }
}
