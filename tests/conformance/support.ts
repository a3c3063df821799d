import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  activePeers,
  connect,
  connectRemote,
  fileUri,
  findProcesses,
  initialize,
  type PeerHandle,
  type PeerKind,
  type Stack,
  type StartPeerOptions,
  startPeer,
  startStack,
  type TestClient,
  type Transport,
  waitUntil,
  workerMarkerEntry,
} from '@tether/test-kit';
import { afterAll, afterEach, expect } from 'vitest';

export const PEER_KINDS: PeerKind[] = ['codex', 'tether'];
export const TRANSPORTS: Transport[] = ['ws', 'stdio'];

/** Every peer × transport combination; the scenario suites run once per entry. */
export const MATRIX = PEER_KINDS.flatMap((kind) => TRANSPORTS.map((transport) => ({ kind, transport })));

/** `describe.each(CASES)('suite: %s', (_label, { kind, transport }) => …)` — labels like `codex over ws`. */
export const CASES = MATRIX.map((entry) => [`${entry.kind} over ${entry.transport}`, entry] as const);

/** Peers in remote mode: registered with the real registry, reached through the real relay (Noise IK). */
export const REMOTE_CASES = PEER_KINDS.map((kind) => [`${kind} over remote`, { kind, transport: 'remote' }] as const);

/** CASES plus the remote variant of each peer, for the exec_process scenarios (local and remote). */
export const CASES_WITH_REMOTE = [...CASES, ...REMOTE_CASES] as const;

export type AnyTransport = Transport | 'remote';

/** Peer kinds with labels, for ws-only or CLI suites. */
export const KIND_CASES = PEER_KINDS.map((kind) => [kind, kind] as const);

/** Environment variable (set by global-setup.ts) naming the run's scratch root. */
export const CONFORMANCE_ROOT_ENV = 'TETHER_CONFORMANCE_ROOT';

function scratchRoot(): string {
  const root = process.env[CONFORMANCE_ROOT_ENV];
  if (root) {
    mkdirSync(root, { recursive: true });
    return root;
  }
  return tmpdir();
}

export interface Session {
  peer: PeerHandle;
  client: TestClient;
  sessionId: string;
  initializeResult: Record<string, unknown>;
}

export interface StartParamsExtra {
  env?: Record<string, string>;
  tty?: boolean;
  pipeStdin?: boolean;
  arg0?: string | null;
  cwd?: string;
  [key: string]: unknown;
}

/**
 * Per-file harness: tracks peers and clients and cleans them up after each test; after the file it
 * checks that no peer and no child started under the file's scratch directory survived.
 */
export function useHarness() {
  const peers = new Set<PeerHandle>();
  const clients = new Set<TestClient>();
  const remotes = new Map<PeerHandle, string>();
  let remoteCount = 0;
  /** The real registry and relay bins, started for the file's first remote peer and shared by the rest. */
  let stack: Promise<Stack> | null = null;
  const workDir = mkdtempSync(join(scratchRoot(), 'work-'));

  afterEach(async () => {
    await Promise.all([...clients].map((c) => c.close().catch(() => undefined)));
    clients.clear();
    await Promise.all([...peers].map((p) => p.close().catch(() => undefined)));
    peers.clear();
    remotes.clear();
  });

  afterAll(async () => {
    await (await stack?.catch(() => null))?.close();
    for (const peer of activePeers()) await peer.close();
    // Children of a stopped peer may need a moment to be reaped by the kernel.
    await waitUntil(
      () => findProcesses({ cwdUnder: workDir, environIncludes: [workerMarkerEntry()] }).length === 0,
      'all peers and their children to exit',
      10_000,
    ).catch(() => undefined);
    const leaked = findProcesses({ cwdUnder: workDir, environIncludes: [workerMarkerEntry()] });
    for (const p of leaked) {
      try {
        process.kill(p.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    rmSync(workDir, { recursive: true, force: true });
    expect(leaked, 'processes that outlived the test file').toEqual([]);
  });

  const harness = {
    /** Scratch directory used as the cwd of every child the tests start. */
    workDir,
    get cwdUri() {
      return fileUri(workDir);
    },
    async start(kind: PeerKind, transport: AnyTransport, options: Partial<StartPeerOptions> = {}): Promise<PeerHandle> {
      if (transport === 'remote') return harness.startRemote(kind, options);
      const peer = await startPeer({ ...options, kind, transport });
      peers.add(peer);
      return peer;
    },
    /**
     * A peer in remote mode (`executor --registry`, `codex exec-server --remote`) on the real registry and
     * relay processes, under an environment of its own; `connect` reaches it through them.
     */
    async startRemote(kind: PeerKind, options: Partial<StartPeerOptions> = {}): Promise<PeerHandle> {
      // The relay resets a harness stream whose socket has more than --harness-max-buffered-bytes queued towards it
      // (relay_backpressure): the SDK resumes and reads back with process/read, but these scenarios' raw client does
      // not, so one that falls behind a fast peer (codex pushes 8 MiB at once) would lose its stream, about one run
      // in eight. The room given here is for the scenarios' outputs; the reset itself is tested by the relay's own
      // tests and its recovery by the reliability suite, which keep the default (4 MiB).
      stack ??= startStack({ relayArgs: ['--harness-max-buffered-bytes', String(64 * 1024 * 1024)] });
      const environmentId = `env-${kind}-${++remoteCount}`;
      const peer = await (await stack).startExecutor(kind, environmentId, options);
      peers.add(peer);
      remotes.set(peer, environmentId);
      return peer;
    },
    async connect(peer: PeerHandle, headers?: Record<string, string>): Promise<TestClient> {
      const environmentId = remotes.get(peer);
      const client =
        environmentId !== undefined
          ? await connectRemote(
              { registryUrl: (await stack!).registryUrl, harnessKey: (await stack!).keys.harness },
              environmentId,
            )
          : await connect(peer, headers ? { headers } : undefined);
      clients.add(client);
      return client;
    },
    /** Peer + connected client + initialize + initialized. */
    async session(kind: PeerKind, transport: AnyTransport, options: Partial<StartPeerOptions> = {}): Promise<Session> {
      const peer = await harness.start(kind, transport, options);
      const client = await harness.connect(peer);
      const initializeResult = await initialize(client, { clientName: 'tether-conformance', resumeSessionId: null });
      return { peer, client, sessionId: initializeResult.sessionId, initializeResult };
    },
    /** `process/start` params in the seed's shape (cwd = scratch dir, exact empty env, no tty). */
    startParams(processId: string, argv: string[], extra: StartParamsExtra = {}): Record<string, unknown> {
      return {
        processId,
        argv,
        cwd: harness.cwdUri,
        env: {},
        tty: false,
        pipeStdin: false,
        arg0: null,
        ...extra,
      };
    },
  };
  return harness;
}

export type Harness = ReturnType<typeof useHarness>;

/** `start` for one test: what it started is closed after the test that started it. */
export function closedAfterEach<T extends { close(): Promise<unknown> }>(start: () => Promise<T>): () => Promise<T> {
  const started: T[] = [];
  afterEach(async () => {
    await Promise.all(started.splice(0).map((it) => it.close()));
  });
  return async () => {
    const it = await start();
    started.push(it);
    return it;
  };
}

/**
 * The seed's parent-lifetime scenario (`remote_exec_server_gracefully_stops_when_parent_stdin_closes`): a remote
 * peer started with CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE=true (and `options`), an initialized client of it, and
 * a process `processId` that exits at once (status 1) if the switch leaked into its environment, else sleeps.
 */
export async function startParentLifetime(
  h: Harness,
  kind: PeerKind,
  processId: string,
  options: Partial<StartPeerOptions> = {},
): Promise<{ peer: PeerHandle; client: TestClient }> {
  const peer = await h.startRemote(kind, {
    ...options,
    env: { ...options.env, CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE: 'true' },
  });
  const client = await h.connect(peer);
  await client.call('initialize', { clientName: 'parent-lifetime-test' });
  client.notify('initialized', {});
  await client.call(
    'process/start',
    h.startParams(
      processId,
      // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell parameter expansion, not a template
      sh('[ -z "${CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE+present}" ] && exec /bin/sleep 60'),
      {
        env: {},
        envPolicy: { inherit: 'all', ignoreDefaultExcludes: false, exclude: [], set: {}, includeOnly: [] },
      },
    ),
  );
  return { peer, client };
}

/** Closes the stdin of a parent-lifetime `peer`: it must exit 0, and its relay stream end with it. */
export async function expectStopOnStdinClose(peer: PeerHandle, client: TestClient): Promise<void> {
  peer.stdin.end();
  expect(await peer.exited, peer.stderr()).toEqual({ code: 0, signal: null });
  await waitUntil(() => client.isClosed, 'the relay stream to end with the executor');
}

/** `sh -c SCRIPT` argv. */
export function sh(script: string): string[] {
  return ['/bin/sh', '-c', script];
}

/**
 * Resumes `sessionId` on a new connection once the server has noticed the old one is gone (until then
 * it answers -32010), and sends `initialized`.
 */
export async function resumeWhenDetached(
  harness: Harness,
  peer: PeerHandle,
  sessionId: string,
  clientName: string,
): Promise<TestClient> {
  let resumed: TestClient | undefined;
  await waitUntil(async () => {
    const candidate = await harness.connect(peer);
    const response = await candidate.request('initialize', { clientName, resumeSessionId: sessionId });
    if (response.error?.code === -32010) return false;
    expect(response.result).toMatchObject({ sessionId });
    resumed = candidate;
    return true;
  }, 'the session to become resumable');
  resumed!.notify('initialized', {});
  return resumed!;
}
