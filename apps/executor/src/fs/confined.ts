/**
 * `fs/*` under a restricted sandbox, as Codex runs them: in a helper process (sandbox-helper.ts) inside the
 * same bubblewrap policy a process would get, with the network always cut. The helper answers as the direct
 * call would, so a denied write is `Read-only file system`, an invisible path `No such file or directory`.
 * One helper per call; a call that fails to prepare is -32600, a helper that dies is -32603.
 */
import { spawn } from 'node:child_process';
import { closeSync, existsSync, openSync, realpathSync } from 'node:fs';
import { dirname, join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ErrorCode, fileUriToPath, RpcError, restrictsFileSystem, type SandboxContext } from '@tether/exec-protocol';
import { type ChildLedger, noteChildProcess } from '@tether/local-process';
import { PLATFORM_READ_ROOTS, type Sandboxer } from '@tether/sandbox';
import { decodeSandbox, prepareSandbox } from '../sandbox-context.js';
import type { ConfinedOp, ConfinedOps } from './confined-ops.js';

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
function helperRuntime(): string[] {
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

/** Runs `op` in the helper under `context`; resolves with its answer or rejects with its RpcError. */
export async function runConfined<K extends ConfinedOp>(
  ctx: { sandbox: Sandboxer; adopter: ChildLedger | null; signal?: AbortSignal | undefined },
  context: SandboxContext,
  op: K,
  args: ConfinedOps[K],
): Promise<unknown> {
  const { sandbox, signal } = ctx;
  checkSandboxCwd(context);
  const prepared = prepareSandbox(
    sandbox,
    context,
    { cwd: '/', tmpdir: process.env.TMPDIR, forceNetworkRestricted: true, extraReadable: helperRuntime() },
    'filesystem sandbox',
    RpcError.invalidRequest,
  );
  try {
    if (prepared.prefix === null) throw RpcError.internal('a restricted filesystem sandbox came without a command');
    const { file, args: prefix } = prepared.prefix;
    const env: Record<string, string> = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
    for (const name of ['TMPDIR', 'TMP', 'TEMP']) if (process.env[name]) env[name] = process.env[name]!;
    let fd3: number | null = null;
    try {
      if (prepared.seccompFile !== null) fd3 = openSync(prepared.seccompFile, 'r');
      const child = spawn(file, [...prefix, process.execPath, helperScript()], {
        cwd: '/',
        env,
        stdio: ['pipe', 'pipe', 'pipe', fd3 ?? 'ignore'],
        ...(signal ? { signal } : {}),
      });
      noteChildProcess(ctx.adopter, child); // the executor's own, not an orphan to adopt
      if (fd3 !== null) closeSync(fd3);
      fd3 = null;
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
      return answer.ok;
    } finally {
      if (fd3 !== null) closeSync(fd3);
    }
  } finally {
    prepared.release();
  }
}
