import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  clampFlowWindow,
  DEFAULT_SHARE_TTL_SEC,
  DecodeError,
  decode,
  decodeBase64,
  ErrorCode,
  FileUriError,
  fileUriToPath,
  Method,
  type NetworkProxyLaunch,
  Notification,
  ProcessAttachParams,
  ProcessIdParams,
  ProcessReadParams,
  type ProcessReadResult,
  ProcessResizeParams,
  ProcessShareParams,
  ProcessSignalParams,
  ProcessStartParams,
  ProcessUnshareParams,
  ProcessWriteBinaryParams,
  ProcessWriteParams,
  RpcError,
  ServerRequest,
} from '@tether/exec-protocol';
import { attachmentOf, takeAttachmentRelease } from '@tether/jsonrpc';
import {
  buildChildEnv,
  inheritedFdArg,
  noteChildProcess,
  ProcessError,
  type ProcessErrorCode,
  type ProcessWrap,
} from '@tether/local-process';
import { loadNativePipe, nativePipeUnavailableReason } from '@tether/native-pipe';
import { likelySandboxDenied, routeTransparentTcp, type Sandboxer } from '@tether/sandbox';
import {
  CredentialInterceptor,
  type CredentialMasking,
  caEnvironment,
  maskEnvironment,
  ProviderConfigError,
  parseCredentialProviders,
} from '../credential-masking.js';
import { helperRuntime } from '../fs/confined.js';
import { DEFAULT_PROXY_LIMITS, type Decider, ManagedProxy, proxyEnvironment, verdictOf } from '../network-proxy.js';
import type { ProcessRecording } from '../recordings.js';
import { RecordingUnavailableError } from '../recordings.js';
import { decodeSandbox, prepareSandbox } from '../sandbox-context.js';
import type { HandlerTable, RequestContext } from './types.js';

/** The one mapping from process-engine errors to JSON-RPC codes. */
const PROCESS_ERROR_CODES: Record<ProcessErrorCode, number> = {
  already_exists: ErrorCode.invalidRequest,
  unknown_process: ErrorCode.invalidRequest,
  starting: ErrorCode.invalidRequest,
  invalid_argument: ErrorCode.invalidParams,
  spawn_failed: ErrorCode.internal,
  start_cancelled: ErrorCode.invalidRequest,
  signal_failed: ErrorCode.internal,
  write_failed: ErrorCode.internal,
  too_many_processes: ErrorCode.invalidRequest,
  shut_down: ErrorCode.invalidRequest,
};

export function toRpcError(err: unknown): RpcError {
  if (RpcError.is(err)) return err;
  if (err instanceof ProcessError || (err instanceof Error && err.name === 'ProcessError')) {
    const processError = err as ProcessError;
    // Codex tags a spawn that found no program (or no cwd) so clients can tell it from other failures.
    const data = processError.osCode === 'ENOENT' ? { kind: 'spawnNotFound' } : undefined;
    return new RpcError(PROCESS_ERROR_CODES[processError.code] ?? ErrorCode.internal, processError.message, data);
  }
  if (err instanceof DecodeError) return RpcError.invalidParams(err.message);
  return RpcError.internal(err instanceof Error ? err.message : String(err));
}

/** Longest process id a start that asks its client about hosts may have (Codex's bound). */
const MAX_CALLBACK_PROCESS_ID_BYTES = 256;

/** Codex's grace on top of `policyDecisionTimeoutMs`: the client's answer is awaited this much longer. */
const POLICY_DECISION_GRACE_MS = 5_000;

/** A domain pattern as Codex takes it: a host name or address, `*` / `*.` / `**.` wildcards at its start. */
const DOMAIN_PATTERN = /^(?:\*|\*\*?\.)?[A-Za-z0-9_.:[\]-]*$/;

/** `networkProxy` refused as Codex refuses it, before anything starts. */
function checkNetworkProxy(
  processId: string,
  launch: NetworkProxyLaunch,
  sandbox: unknown,
  sandboxer: Sandboxer,
): void {
  if (!launch.proxy.enabled) {
    throw RpcError.invalidParams(
      'invalid network proxy config: executor-local network proxy launch requires an enabled proxy',
    );
  }
  for (const pattern of launch.proxy.reviewDomains ?? []) {
    if (pattern === '') throw RpcError.invalidParams('invalid network proxy config: domain pattern is empty');
    if (!DOMAIN_PATTERN.test(pattern)) {
      throw RpcError.invalidParams(`invalid network proxy config: unsupported domain pattern syntax: ${pattern}`);
    }
  }
  if (launch.proxy.transparentTcp === true) {
    // Codex's refusals first; past them the command's own TCP goes through the SOCKS5 listener by the sandbox's
    // relay (capability networkProxyTransparentTcp, where this host can redirect a namespace's TCP).
    if (sandbox === undefined || sandbox === null) {
      throw RpcError.invalidParams('transparent TCP requires a managed Linux sandbox');
    }
    if (!launch.proxy.enableSocks5) {
      throw RpcError.invalidParams(
        'invalid network proxy config: transparent_tcp requires an enabled managed SOCKS5 proxy',
      );
    }
    const unavailable = sandboxer.transparentTcp.reason ?? nativePipeUnavailableReason();
    if (unavailable !== null) {
      throw RpcError.invalidParams(`transparent TCP is not supported by this exec-server: ${unavailable}`);
    }
  }
  try {
    parseCredentialProviders(launch.proxy.credentialProviders);
  } catch (err) {
    if (err instanceof ProviderConfigError) throw RpcError.invalidParams(err.message);
    throw err;
  }
  const timeout = launch.policyDecisionTimeoutMs;
  if (timeout === 0) throw RpcError.invalidParams('network policy decision callback timeout must be nonzero');
  if (
    timeout !== undefined &&
    timeout !== null &&
    (processId === '' || Buffer.byteLength(processId) > MAX_CALLBACK_PROCESS_ID_BYTES)
  ) {
    throw RpcError.invalidParams(
      `callback-enabled process ID must be non-empty and at most ${MAX_CALLBACK_PROCESS_ID_BYTES} bytes`,
    );
  }
}

function startProcess(params: ProcessStartParams, sandboxer: Sandboxer) {
  if (params.argv.length === 0) throw RpcError.invalidParams('argv must not be empty');
  // Fields Tether does not implement fail closed rather than running unconfined.
  if (params.managedNetwork !== undefined && params.managedNetwork !== null) {
    throw RpcError.invalidParams('`managedNetwork` is not supported by this exec-server');
  }
  if (params.networkProxy) checkNetworkProxy(params.processId, params.networkProxy, params.sandbox, sandboxer);
  let cwd: string;
  try {
    cwd = fileUriToPath(params.cwd);
  } catch (err) {
    if (err instanceof FileUriError) {
      throw RpcError.invalidParams(
        err.kind === 'syntax'
          ? err.message
          : `cwd URI \`${params.cwd}\` is not valid on this exec-server host: ${err.message}`,
      );
    }
    throw err;
  }
  const env = buildChildEnv(params.env, params.envPolicy ?? null, process.env);
  return { cwd, env };
}

/** The relay's transparent TCP port is picked at random in [base, base + span), below Linux's ephemeral range. */
const TRANSPARENT_PORT_BASE = 10_000;
const TRANSPARENT_PORT_SPAN = 20_000;

/**
 * The relay a sandboxed command with managed networking runs behind (proxy-relay.ts): beside this bundle (the
 * packed executor's dist/), beside this file's directory (tsc's dist/), or tsc's dist/ when this runs from source.
 */
function relayScript(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  for (const candidate of [join(here, 'proxy-relay.js'), join(here, '..', 'proxy-relay.js')]) {
    if (existsSync(candidate)) return candidate;
  }
  return join(here, '..', '..', 'dist', 'proxy-relay.js');
}

/**
 * The sandbox a start asks for (capability `processSandbox`): bubblewrap with the profile's filesystem, its
 * network, and the seccomp filter (@tether/sandbox). Null without one. As Codex's, a profile is never run
 * unconfined: one this host cannot enforce is refused (-32602, saying why and how to fix it). With Codex's
 * managed network enforced (`proxy`), the command runs in a network namespace of its own behind the relay,
 * whose loopback port is the only way out (the relay's upstream connections come over its channel).
 */
async function startSandbox(
  raw: unknown,
  cwd: string,
  env: Record<string, string>,
  ctx: RequestContext,
  proxy: ManagedProxy | null,
  transparentTcp = false,
): Promise<ProcessWrap | null> {
  const context = decodeSandbox(raw);
  if (context === null) return null;
  let managedNetwork: { relay: string[] } | null = null;
  let extraReadable: string[] | undefined;
  let inheritFds: (() => number[]) | undefined;
  if (proxy !== null) {
    const native = loadNativePipe();
    if (native === null) {
      throw RpcError.invalidParams(
        `managed network enforcement cannot be enforced on this executor: ${nativePipeUnavailableReason()}`,
      );
    }
    // The relay and what it loads (node, its script, the descriptor-passing addon) stay readable.
    extraReadable = helperRuntime();
    // The relay carries both listeners: inside, the variables name its own ports for them.
    const relay = [
      process.execPath,
      '--disable-sigusr1',
      relayScript(),
      inheritedFdArg(0),
      inheritedFdArg(1),
      `http://127.0.0.1:${proxy.port}`,
      String(DEFAULT_PROXY_LIMITS.maxConnections),
    ];
    if (proxy.socksPort !== null) relay.push('--socks', `socks5h://127.0.0.1:${proxy.socksPort}`);
    let route: ((pid: number) => Promise<boolean>) | null = null;
    const tools = ctx.sandbox.transparentTcp.tools;
    if (transparentTcp && tools !== null) {
      // The relay's transparent port, in a namespace of its own where nothing else listens yet.
      const port = TRANSPARENT_PORT_BASE + Math.floor(Math.random() * TRANSPARENT_PORT_SPAN);
      relay.push('--transparent', String(port));
      // Refused, the relay ends the start (exit 125, saying so on stderr); the probe makes that rare.
      route = (pid) =>
        routeTransparentTcp(tools, pid, port, (child) => noteChildProcess(ctx.adopter, child)).then(
          () => true,
          () => false,
        );
    }
    managedNetwork = { relay: [...relay, '--'] };
    // A channel of its own for each run of the relay (the snapshot's capture, the command).
    inheritFds = () => proxy.openRelayChannel(native, route);
  }
  const prepared = await prepareSandbox(
    ctx.sandbox,
    context,
    { cwd, tmpdir: env.TMPDIR, managedNetwork, ...(extraReadable ? { extraReadable } : {}) },
    'sandbox intent',
    RpcError.invalidParams,
  );
  return {
    file: prepared.prefix?.file ?? '',
    args: prepared.prefix?.args ?? [],
    fd3File: prepared.seccompFile,
    unwrapped: prepared.prefix === null,
    classifyExit: likelySandboxDenied,
    released: prepared.release,
    ...(inheritFds && prepared.prefix !== null ? { inheritFds } : {}),
  };
}

/**
 * The start's managed proxy (capability `networkProxyLaunch`, network-proxy.ts), null without one: its variables
 * go into `env` and its decisions to the connection that started the process. A sandboxed start that enforces
 * it reaches it through the sandbox's relay (`openRelayChannel`).
 */
async function startNetworkProxy(
  params: ProcessStartParams,
  env: Record<string, string>,
  ctx: RequestContext,
): Promise<ManagedProxy | null> {
  const launch = params.networkProxy;
  if (!launch) return null;
  const timeout = launch.policyDecisionTimeoutMs;
  // Decisions and questions go to whichever connection the session is attached to then (a resumed one too,
  // as Codex's); while it is detached, decisions are dropped and a question is answered by nobody (deny).
  const session = ctx.session();
  // Only a client that set a timeout is ever asked (capability `networkProxyReviewDomains`).
  const decider: Decider | null =
    timeout === undefined || timeout === null
      ? null
      : async (request) =>
          verdictOf(
            (await session.attachment?.ask(
              ServerRequest.networkPolicyRequest,
              { processId: params.processId, request },
              timeout + POLICY_DECISION_GRACE_MS,
            )) ?? { kind: 'none', reason: 'the session is detached' },
          );
  const interceptor =
    launch.proxy.credentialMasking === true ? await maskCredentials(params, env, ctx.credentialMasking) : null;
  const proxy = await ManagedProxy.start(
    launch.proxy,
    (decision) => {
      ctx.networkAudit.decided(params.processId, launch, decision);
      session.attachment?.notify(Notification.networkPolicyDecision, { processId: params.processId, ...decision });
    },
    DEFAULT_PROXY_LIMITS,
    decider,
    interceptor,
  );
  proxy.onClose(ctx.networkAudit.started());
  Object.assign(env, proxyEnvironment(proxy.port, launch.proxy.allowLocalBinding, proxy.socksPort));
  return proxy;
}

/**
 * Capability `credentialMasking`: `env` told to trust the executor's CA and, for a `bash -c` start, its credentials
 * replaced by dummies; the interceptor that swaps them back at their destinations, null when nothing was masked.
 */
async function maskCredentials(
  params: ProcessStartParams,
  env: Record<string, string>,
  masking: CredentialMasking,
): Promise<CredentialInterceptor | null> {
  const authority = await masking.authority();
  Object.assign(env, caEnvironment(authority.bundlePath));
  const providers = parseCredentialProviders(params.networkProxy?.proxy.credentialProviders);
  const allowLocal = params.networkProxy?.proxy.allowLocalBinding === true;
  const { credentials } = maskEnvironment(env, params.argv, providers, masking.dummies, allowLocal);
  return credentials.length === 0 ? null : new CredentialInterceptor(authority, credentials);
}

/** `sandbox` (or running as usual without one) that also closes `proxy` once the process is gone. */
function closingProxy(sandbox: ProcessWrap | null, proxy: ManagedProxy | null): ProcessWrap | null {
  if (proxy === null) return sandbox;
  const base: ProcessWrap = sandbox ?? {
    file: '',
    args: [],
    fd3File: null,
    unwrapped: true,
    classifyExit: () => false,
    released: () => undefined,
  };
  return {
    ...base,
    released: () => {
      proxy.close();
      base.released();
    },
  };
}

export const processHandlers: HandlerTable = {
  [Method.processStart]: async (raw, ctx) => {
    const params = decode(ProcessStartParams, raw);
    const started = startProcess(params, ctx.sandbox);
    // A malformed sandbox is refused before a proxy starts.
    const sandboxType = decodeSandbox(params.sandbox) === null ? 'none' : 'linuxSeccomp';
    const proxy = await startNetworkProxy(params, started.env, ctx);
    let wrap: ProcessWrap | null;
    try {
      // Transparent TCP implies the sandbox's own network behind the relay, enforced or not (as Codex's).
      const transparentTcp = params.networkProxy?.proxy.transparentTcp === true;
      const enforced = params.enforceManagedNetwork === true || transparentTcp ? proxy : null;
      wrap = closingProxy(
        await startSandbox(params.sandbox, started.cwd, started.env, ctx, enforced, transparentTcp),
        proxy,
      );
    } catch (err) {
      proxy?.close();
      throw err;
    }
    // A login shell of a snapshot's scope restores the snapshot instead of reading its profile (capability
    // `shellSnapshotV2`, shell-snapshot.ts); a sandboxed start's profile is captured in its sandbox.
    const snapshot = params.shellSnapshot;
    let applied: { argv: string[]; cwd: string; env: Record<string, string> };
    try {
      applied = snapshot
        ? await ctx.shellSnapshots.apply(snapshot, { argv: params.argv, ...started }, wrap)
        : { argv: params.argv, ...started };
    } catch (err) {
      wrap?.released();
      throw err;
    }
    const { argv, cwd, env } = applied;
    // `--record-dir`: the session is recorded from its first byte (recordings.ts); with the policy `closed`, a
    // recording that cannot be opened refuses the start.
    let recording: ProcessRecording | null = null;
    try {
      recording =
        (await ctx.recordings?.begin({
          processId: params.processId,
          argv: params.argv,
          tty: params.tty,
          size: params.size ?? null,
          startedBy: ctx.principal,
          detached: params.detached === true,
        })) ?? null;
    } catch (err) {
      wrap?.released();
      if (err instanceof RecordingUnavailableError) throw RpcError.internal(err.message);
      throw err;
    }
    const request = {
      processId: params.processId,
      argv,
      cwd,
      env,
      tty: params.tty,
      pipeStdin: params.pipeStdin ?? false,
      arg0: params.arg0 ?? null,
      size: params.size ?? null,
      wrap,
      recording,
    };
    const flowWindowBytes = params.flowControl ? clampFlowWindow(params.flowControl.windowBytes) : null;
    // Raw bytes need a transport that carries attachments (not stdio); elsewhere the output stays base64.
    const binaryOutput = params.binaryOutput === true && ctx.carriesAttachments;
    try {
      // Capability `processDetach` (detached.ts): owned by the executor, never flow-controlled, and its
      // output reaches sessions that attach (base64 notifications) or read.
      if (params.detached === true) await ctx.session().startDetached(request);
      else await ctx.session().startProcess({ ...request, flowWindowBytes, binaryOutput });
    } catch (err) {
      // Refused before it ran (a known id, a limit): the sandbox's mount points go (releasing twice is harmless),
      // and the recording ends with what it has (closing twice is harmless).
      wrap?.released();
      recording?.close();
      throw err;
    }
    // With the policy `closed`, a process whose recording fails is ended (as a terminate).
    recording?.onFailClosed(() => {
      try {
        ctx.session().terminateProcess(params.processId);
      } catch {
        // Its connection is gone or it is gone: nothing more to end.
      }
    });
    if (params.detached === true) return { processId: params.processId, sandboxType, detached: true };
    return {
      processId: params.processId,
      sandboxType,
      ...(flowWindowBytes === null ? {} : { flowControl: { windowBytes: flowWindowBytes } }),
    };
  },

  [Method.processRead]: async (raw, ctx): Promise<ProcessReadResult> => {
    const params = decode(ProcessReadParams, raw);
    const result = await ctx
      .session()
      .tableFor(params.processId, 'attach')
      .read(params.processId, {
        afterSeq: params.afterSeq ?? null,
        maxBytes: params.maxBytes ?? null,
        waitMs: params.waitMs ?? null, // the process table clamps it to what a timer can express
        signal: ctx.signal,
      });
    return {
      chunks: result.chunks.map((chunk) => ({
        seq: chunk.seq,
        stream: chunk.stream,
        chunk: chunk.chunk.toString('base64'),
      })),
      nextSeq: result.nextSeq,
      exited: result.exited,
      exitCode: result.exitCode,
      closed: result.closed,
      failure: null,
      sandboxDenied: result.sandboxDenied,
    };
  },

  [Method.processWrite]: async (raw, ctx) => {
    const attachment = attachmentOf(raw);
    let params: ProcessWriteBinaryParams;
    let data: Buffer;
    if (attachment) {
      // binaryInput: the bytes are the request's attachment (given back below once the child has them); a
      // `chunk` as well would be ambiguous.
      params = decode(ProcessWriteBinaryParams, raw);
      if ('chunk' in params) throw RpcError.invalidParams('`chunk` and a binary attachment are exclusive');
      data = attachment;
    } else {
      const textual = decode(ProcessWriteParams, raw);
      params = textual;
      try {
        data = decodeBase64(textual.chunk);
      } catch (err) {
        throw RpcError.invalidParams(`process/write requires valid base64 chunk: ${(err as Error).message}`);
      }
    }
    if (params.writeId.length === 0) throw RpcError.invalidParams('writeId must not be empty');
    // A pooled attachment goes back once the child's stdin has written it (or the write was refused).
    const release = attachment ? takeAttachmentRelease(raw) : undefined;
    const status = await ctx.session().writeProcess(params.processId, data, params.writeId, release);
    return { status };
  },

  [Method.processSignal]: async (raw, ctx) => {
    const params = decode(ProcessSignalParams, raw);
    ctx.session().tableFor(params.processId, 'control').signal(params.processId, params.signal);
    return {};
  },

  [Method.processTerminate]: async (raw, ctx) => {
    const params = decode(ProcessIdParams, raw);
    const outcome = ctx.session().terminateProcess(params.processId);
    return { running: outcome.running };
  },

  [Method.processResize]: async (raw, ctx) => {
    const params = decode(ProcessResizeParams, raw);
    ctx.session().tableFor(params.processId, 'control').resize(params.processId, params.rows, params.cols);
    return {};
  },

  [Method.processCloseStdin]: async (raw, ctx) => {
    const params = decode(ProcessIdParams, raw);
    const status = ctx.session().tableFor(params.processId, 'control').closeStdin(params.processId);
    return { status };
  },

  [Method.processList]: async (_raw, ctx) => {
    return { processes: ctx.session().listProcesses() };
  },

  [Method.processAttach]: async (raw, ctx) => {
    const params = decode(ProcessAttachParams, raw);
    return ctx.session().attachDetached(params.processId, params.shareToken);
  },

  [Method.processShare]: async (raw, ctx) => {
    const params = decode(ProcessShareParams, raw);
    return ctx
      .session()
      .shareDetached(params.processId, params.access, (params.ttlSec ?? DEFAULT_SHARE_TTL_SEC) * 1000);
  },

  [Method.processUnshare]: async (raw, ctx) => {
    const params = decode(ProcessUnshareParams, raw);
    return { revoked: ctx.session().unshareDetached(params.processId, params.shareId) };
  },
};
