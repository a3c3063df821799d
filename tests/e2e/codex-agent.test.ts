/**
 * The unmodified Codex agent (`codex exec` 0.171.0) running its tool calls on an exec server, driven by a
 * scripted model (a mock Responses API on 127.0.0.1). The agent is told where its exec server is the way
 * Codex documents it: `CODEX_EXEC_SERVER_URL` for a WebSocket, or `CODEX_EXEC_SERVER_NOISE_REGISTRY_URL`,
 * `_ENVIRONMENT_ID` and `_AUTH_TOKEN` for a registry + relay + Noise rendezvous. Every scenario runs
 * against our executor and against `codex exec-server`: the codex column proves the mock and the
 * assertions, the tether column that the agent gets the same from ours.
 *
 * A command proves where it ran by printing its parent's pid, which must be the exec server or one of its
 * descendants (never the agent: without an exec server, `codex exec` runs commands itself).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  codexBinaryPath,
  descendantPids,
  findProcesses,
  type MockScriptStep,
  type OriginCertificates,
  type PeerHandle,
  type PeerKind,
  type Stack,
  startMockResponses,
  startPeer,
  startStack,
  writeOriginCertificates,
} from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

type Path = 'ws' | 'rendezvous';

/** Known only to the executor's environment and the MCP server. */
const MCP_TOKEN = 'mcp-token-only-the-executor-knows';

/**
 * Credentials in the executor's environment only (fake): a GitHub token, masked by every masking executor, and one
 * of the test's own credential provider (`swap`, bound to the HTTPS origin's `/api/`).
 */
const GITHUB_TOKEN = 'ghp_0123456789abcdefABCDEF0123456789abcdef';
const SWAP_TOKEN = 'swp_0123456789abcdef';

interface McpServer {
  url: string;
  /** What each POST carried: its JSON-RPC method and Authorization header. */
  requests: { method: string; authorization: string | undefined }[];
  close(): Promise<void>;
}

/**
 * A minimal MCP server over streamable HTTP on 127.0.0.1 (JSON answers, no SSE): initialize, tools/list with one
 * `echo` tool, tools/call; it keeps what each request carried.
 */
async function startMcpServer(): Promise<McpServer> {
  const requests: McpServer['requests'] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => {
      body += chunk;
    });
    req.on('end', () => {
      if (req.method !== 'POST') {
        res.writeHead(405).end();
        return;
      }
      const message = JSON.parse(body || '{}') as { id?: number; method?: string; params?: Record<string, unknown> };
      requests.push({ method: String(message.method), authorization: req.headers.authorization });
      if (message.id === undefined) {
        res.writeHead(202).end();
        return;
      }
      const result =
        message.method === 'initialize'
          ? {
              protocolVersion: message.params?.protocolVersion,
              capabilities: { tools: {} },
              serverInfo: { name: 'probe', version: '1' },
            }
          : message.method === 'tools/list'
            ? {
                tools: [
                  {
                    name: 'echo',
                    description: 'echoes its text',
                    inputSchema: { type: 'object', properties: { text: { type: 'string' } } },
                  },
                ],
              }
            : { content: [{ type: 'text', text: 'echoed' }] };
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ jsonrpc: '2.0', id: message.id, result }));
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
/** Skills on the executor's side: under its CODEX_HOME/skills, then under its HOME/.agents/skills. */
const EXECUTOR_SKILLS = [
  { name: 'executor-home-skill', description: 'Found only in the executor CODEX_HOME skills' },
  { name: 'executor-agents-skill', description: 'Found only in the executor user agents skills' },
] as const;

/**
 * A command's own TCP, proxy variables ignored (raw `net.connect`): to a TEST-NET address, to a denied name, to
 * the loopback at the origin's port (argv[2]), then to the address the sandbox's resolver gives `localhost` (its
 * DNS server asked, not /etc/hosts); sends a request once connected and prints how each went. A reset is one
 * whether or not node saw the connection established first (the refusal can beat node's look at the connect).
 */
const TRANSPARENT_CONNECTS = `
const net = require('node:net');
const attempt = (host, port) => new Promise((resolve) => {
  const socket = net.connect({ host, port });
  let answer = '';
  socket.on('connect', () => socket.write('GET /transparent HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n'));
  socket.on('data', (d) => { answer += d; });
  socket.on('error', (e) => { console.log(host + ' ' + (e.code === 'ECONNRESET' ? 'reset' : e.code)); resolve(); });
  socket.on('close', (failed) => { if (!failed) console.log(host + ' answered ' + JSON.stringify(answer.split('\\r\\n').pop().trim())); resolve(); });
});
(async () => {
  const port = Number(process.argv[2]);
  await attempt('203.0.113.7', 80);
  await attempt('denied.invalid', 80);
  await attempt('127.0.0.1', port);
  const [address] = await require('node:dns').promises.resolve4('localhost');
  console.log('localhost is ' + address);
  await attempt(address, port);
})();
`;

const CASES = (['codex', 'tether'] as PeerKind[]).flatMap((kind) =>
  (['ws', 'rendezvous'] as Path[]).map((path) => [`${kind} executor over ${path}`, { kind, path }] as const),
);

const AGENT_TIMEOUT_MS = 90_000;
/** 3 MB: three times the 1 MiB of output either executor retains per process. */
const LARGE_BYTES = 3_000_000;

interface AgentRun {
  code: number | null;
  stdout: string;
  stderr: string;
  /** The `function_call_output` of each tool call, as the agent sent it to the model. */
  outputs: string[];
  offeredTools: string[];
  /** The tool namespaces (MCP servers) the first request offered, with their tools' names. */
  offeredNamespaces: { name: string; tools: string[] }[];
  /** The first request to the model, as sent. */
  firstRequest: Record<string, unknown>;
}

const sessionIdOf = (output: string | undefined) => {
  const match = /Process running with session ID (\d+)/.exec(output ?? '');
  if (!match) throw new Error(`the agent reported no running session: ${output}`);
  return Number(match[1]);
};

describe.each(CASES)('codex exec agent → %s', (_label, { kind, path }) => {
  let stack: Stack | undefined;
  let peer: PeerHandle;
  let work: string;
  let agentEnv: Record<string, string>;
  const agents = new Set<ChildProcess>();

  /**
   * The executor's HOME, whose login profile the agent's commands see (the agent takes a command's environment
   * from the executor's): it leaves a variable and a function (~/.bashrc another) and counts its runs where it
   * may write (a read-only sandbox silently stops the count).
   */
  let profileHome: string;
  let originCerts: OriginCertificates;
  let mcp: McpServer;
  const profileRuns = () => {
    const runs = join(profileHome, 'runs');
    return existsSync(runs) ? readFileSync(runs, 'utf8').split('\n').filter(Boolean) : [];
  };

  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), 'tether-codex-agent-'));
    profileHome = mkdtempSync(join(tmpdir(), 'tether-codex-agent-profile-'));
    const runs = join(profileHome, 'runs');
    writeFileSync(
      join(profileHome, '.bash_profile'),
      `{ echo profile >> '${runs}'; } 2>/dev/null\nexport FROM_PROFILE=exported\ngreet() { echo "greeting from the profile"; }\n`,
    );
    writeFileSync(
      join(profileHome, '.bashrc'),
      `{ echo rc >> '${runs}'; } 2>/dev/null\nrcfn() { echo "from bashrc"; }\n`,
    );
    // An MCP server configured on the executor's side, its token in the executor's environment only.
    mcp = await startMcpServer();
    const executorCodexHome = join(profileHome, 'codex-home');
    mkdirSync(executorCodexHome);
    writeFileSync(
      join(executorCodexHome, 'config.toml'),
      `[mcp_servers.probe]\nurl = "${mcp.url}"\nbearer_token_env_var = "PROBE_MCP_TOKEN"\n`,
    );
    // Skills only the executor has: one under its CODEX_HOME, one under its HOME's ~/.agents (capabilities/discoverV2).
    for (const [root, skill] of [
      [join(executorCodexHome, 'skills'), EXECUTOR_SKILLS[0]],
      [join(profileHome, '.agents', 'skills'), EXECUTOR_SKILLS[1]],
    ] as const) {
      mkdirSync(join(root, skill.name), { recursive: true });
      writeFileSync(
        join(root, skill.name, 'SKILL.md'),
        `---\nname: ${skill.name}\ndescription: ${skill.description}\n---\n\nSay the skill's name.\n`,
      );
    }
    // The HTTPS origin's certificates for credential masking; the executor trusts their CA upstream (it is added
    // to the platform's roots) and holds the credentials masking hides from a command (other scenarios see them).
    const certDir = join(profileHome, 'origin-certs');
    mkdirSync(certDir);
    originCerts = writeOriginCertificates(certDir);
    const executorEnv = {
      env: {
        HOME: profileHome,
        CODEX_HOME: executorCodexHome,
        PROBE_MCP_TOKEN: MCP_TOKEN,
        SSL_CERT_FILE: originCerts.ca,
        GITHUB_TOKEN,
        SWAP_TOKEN,
      },
    };
    const environmentId = `env-agent-${kind}`;
    if (path === 'ws') {
      peer = await startPeer({ kind, transport: 'ws', ...executorEnv });
      agentEnv = { CODEX_EXEC_SERVER_URL: peer.url as string };
    } else {
      stack = await startStack();
      peer = await stack.startExecutor(kind, environmentId, executorEnv);
      agentEnv = {
        CODEX_EXEC_SERVER_NOISE_REGISTRY_URL: stack.registryUrl,
        CODEX_EXEC_SERVER_NOISE_ENVIRONMENT_ID: environmentId,
        CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN: stack.keys.harness,
      };
    }
  });

  afterAll(async () => {
    for (const agent of agents) agent.kill('SIGKILL');
    await peer?.close();
    await stack?.close();
    if (work) {
      expect(findProcesses({ cwdUnder: work })).toEqual([]);
      rmSync(work, { recursive: true, force: true });
    }
    if (profileHome) rmSync(profileHome, { recursive: true, force: true });
    await mcp?.close();
  });

  /** Runs `codex exec` once with the script as its model (`extraConfig`: more config.toml); resolves when it exits. */
  async function runAgent(script: MockScriptStep[], args: string[] = [], extraConfig = ''): Promise<AgentRun> {
    const model = await startMockResponses(script);
    const home = mkdtempSync(join(tmpdir(), 'tether-codex-agent-home-'));
    try {
      writeFileSync(join(home, 'config.toml'), `${model.codexConfig()}\n${extraConfig}`);
      const env: Record<string, string> = {};
      for (const [name, value] of Object.entries(process.env)) {
        if (value !== undefined && !name.startsWith('CODEX_')) env[name] = value;
      }
      const agent = spawn(codexBinaryPath(), ['exec', '--skip-git-repo-check', ...args, 'run the scripted task'], {
        cwd: work,
        env: { ...env, CODEX_HOME: home, RUST_LOG: 'error', ...agentEnv },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      agents.add(agent);
      let stdout = '';
      let stderr = '';
      agent.stdout.on('data', (d: Buffer) => {
        stdout += d;
      });
      agent.stderr.on('data', (d: Buffer) => {
        if (stderr.length < 256 * 1024) stderr += d;
      });
      const timer = setTimeout(() => agent.kill('SIGKILL'), AGENT_TIMEOUT_MS);
      const [code] = (await once(agent, 'exit')) as [number | null];
      clearTimeout(timer);
      agents.delete(agent);
      const tools = (model.requests[0]?.body.tools ?? []) as {
        type?: string;
        name?: string;
        tools?: { name: string }[];
      }[];
      const offeredNamespaces = tools
        .filter((t) => t.type === 'namespace')
        .map((t) => ({ name: String(t.name), tools: (t.tools ?? []).map((f) => f.name) }));
      return {
        code,
        stdout,
        stderr,
        outputs: model.toolOutputs(),
        offeredTools: model.offeredTools(),
        offeredNamespaces,
        firstRequest: model.requests[0]?.body ?? {},
      };
    } finally {
      await model.close();
      rmSync(home, { recursive: true, force: true });
    }
  }

  /**
   * A sandboxed command's parent is its PID namespace's init (pid 1), so it proves where it ran otherwise:
   * it sleeps `seconds` (a duration nothing else uses), and this watches for that sleep among the exec
   * server's descendants while the agent runs. Resolves whether it was seen.
   */
  function watchForSleep(seconds: string): { seen: () => boolean; stop: () => void } {
    let seen = false;
    const timer = setInterval(() => {
      for (const pid of descendantPids(peer.pid)) {
        try {
          if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').includes(`sleep ${seconds}`))
            seen = true;
        } catch {}
      }
    }, 50);
    return { seen: () => seen, stop: () => clearInterval(timer) };
  }

  /**
   * The agent under `-s policy` runs `cmd` (which sleeps `seconds`, for watchForSleep) and ends: it must exit 0,
   * and the command must have run under the exec server. Answers the run.
   */
  async function runSandboxed(policy: string, cmd: string, seconds: string): Promise<AgentRun> {
    const watch = watchForSleep(seconds);
    const run = await runAgent(
      [
        { type: 'call', name: 'exec_command', arguments: { cmd } },
        { type: 'message', text: `${policy} done` },
      ],
      ['-s', policy],
    ).finally(watch.stop);
    expect(run.code, run.stderr).toBe(0);
    expect(watch.seen(), 'the command ran under the exec server').toBe(true);
    return run;
  }

  /** The pid a command printed as `PPID=N` is the exec server's or a descendant's. */
  function expectRanOnExecutor(output: string | undefined) {
    const match = /PPID=(\d+)/.exec(output ?? '');
    expect(match, output).not.toBeNull();
    expect([peer.pid, ...descendantPids(peer.pid)]).toContain(Number(match?.[1]));
  }

  it('runs a plain command on the executor and gives its output to the model', async () => {
    const run = await runAgent([
      { type: 'call', name: 'exec_command', arguments: { cmd: 'echo PPID=$PPID; echo plain-out; exit 3' } },
      { type: 'message', text: 'plain done' },
    ]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.offeredTools).toEqual(expect.arrayContaining(['exec_command', 'write_stdin']));
    expect(run.outputs).toHaveLength(1);
    expectRanOnExecutor(run.outputs[0]);
    expect(run.outputs[0]).toContain('Process exited with code 3');
    expect(run.outputs[0]).toMatch(/Output:\nPPID=\d+\nplain-out\n$/);
    expect(run.stdout).toContain('plain done');
  });

  it('under -s workspace-write: writes in the workspace land, writes elsewhere fail with a read-only file system', async () => {
    // Outside /tmp, which the policy makes writable.
    const outside = mkdtempSync('/var/tmp/tether-codex-agent-outside-');
    try {
      const run = await runSandboxed(
        'workspace-write',
        `touch written-here && echo inside-ok; touch ${outside}/x; sleep 0.731; exit 0`,
        '0.731',
      );
      expect(run.outputs[0]).toContain('inside-ok');
      expect(run.outputs[0]).toContain(`touch: cannot touch '${outside}/x': Read-only file system`);
      expect(existsSync(join(work, 'written-here'))).toBe(true);
      expect(readdirSync(outside)).toEqual([]);
    } finally {
      rmSync(outside, { recursive: true, force: true });
    }
  });

  it('under -s read-only: nothing is writable, not even the workspace, and there is no network', async () => {
    const run = await runSandboxed(
      'read-only',
      'touch read-only-attempt; sleep 0.732; exec 3<>/dev/tcp/127.0.0.1/9; exit 0',
      '0.732',
    );
    expect(run.outputs[0]).toContain("touch: cannot touch 'read-only-attempt': Read-only file system");
    expect(run.outputs[0]).toContain('socket: Operation not permitted');
    expect(existsSync(join(work, 'read-only-attempt'))).toBe(false);
  });

  it('runs a command on a PTY', async () => {
    const run = await runAgent([
      {
        type: 'call',
        name: 'exec_command',
        arguments: { cmd: 'echo PPID=$PPID; tty; test -t 1 && echo on-a-tty', tty: true },
      },
      { type: 'message', text: 'pty done' },
    ]);
    expect(run.code, run.stderr).toBe(0);
    expectRanOnExecutor(run.outputs[0]);
    expect(run.outputs[0]).toContain('Process exited with code 0');
    expect(run.outputs[0]).toMatch(/\/dev\/pts\/\d+\r\non-a-tty\r\n/);
  });

  it('polls a long-running command and writes to its stdin', async () => {
    const run = await runAgent([
      {
        type: 'call',
        name: 'exec_command',
        arguments: { cmd: 'echo PPID=$PPID; read line; echo got:$line', tty: true, yield_time_ms: 1000 },
      },
      // A poll: nothing written, the command still waits for its line.
      (outputs) => ({
        type: 'call',
        name: 'write_stdin',
        arguments: { session_id: sessionIdOf(outputs[0]), chars: '', yield_time_ms: 500 },
      }),
      (outputs) => ({
        type: 'call',
        name: 'write_stdin',
        arguments: { session_id: sessionIdOf(outputs[0]), chars: 'hello-stdin\n', yield_time_ms: 5000 },
      }),
      { type: 'message', text: 'stdin done' },
    ]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.outputs).toHaveLength(3);
    const [started, polled, written] = run.outputs as [string, string, string];
    expect(started).toContain('Process running with session ID');
    expect(polled).toContain('Process running with session ID');
    expect(`${started}${polled}`).toMatch(/PPID=\d+/);
    expectRanOnExecutor(`${started}${polled}`);
    expect(written).toContain('Process exited with code 0');
    expect(written).toContain('got:hello-stdin\r\n');
  });

  it('with shell_snapshot_v2: the login profile, evaluated once, reaches every command (its functions and ~/.bashrc too)', async () => {
    const before = profileRuns();
    const cmd =
      'echo PPID=$PPID; echo "FROM_PROFILE=$FROM_PROFILE"; greet; rcfn; shopt -q login_shell || echo no-login';
    const run = await runAgent(
      [
        { type: 'call', name: 'exec_command', arguments: { cmd } },
        { type: 'call', name: 'exec_command', arguments: { cmd } },
        { type: 'message', text: 'snapshot done' },
      ],
      ['--enable', 'shell_snapshot_v2', '-s', 'danger-full-access'],
    );
    expect(run.code, run.stderr).toBe(0);
    expect(run.outputs).toHaveLength(2);
    for (const output of run.outputs) {
      expectRanOnExecutor(output);
      expect(output).toMatch(/FROM_PROFILE=exported\ngreeting from the profile\nfrom bashrc\nno-login\n$/);
    }
    // Two commands, one evaluation of the profile (and of ~/.bashrc, which a login shell alone would skip).
    expect(profileRuns().slice(before.length)).toEqual(['profile', 'rc']);
  });

  it('an MCP server configured on the executor reaches the model; its bearer token is added by the executor and never crosses', async () => {
    mcp.requests.length = 0;
    const run = await runAgent([{ type: 'message', text: 'mcp done' }]);
    expect(run.code, run.stderr).toBe(0);
    // The agent found the server through environmentConfig/read and listed its tools over http/request.
    const namespaces = run.offeredNamespaces;
    expect(namespaces).toContainEqual({ name: 'mcp__probe', tools: ['echo'] });
    expect(mcp.requests.map((r) => r.method)).toEqual(expect.arrayContaining(['initialize', 'tools/list']));
    // Every call carried the token from the executor's environment (httpHeaderEnvVars); the agent never had it.
    expect(mcp.requests.every((r) => r.authorization === `Bearer ${MCP_TOKEN}`)).toBe(true);
    expect(run.stdout + run.stderr).not.toContain(MCP_TOKEN);
  });

  it("with executor_capability_discovery_v2: the executor's skills (its CODEX_HOME and ~/.agents roots) reach the model", async () => {
    const run = await runAgent(
      [{ type: 'message', text: 'skills done' }],
      ['--enable', 'executor_capability_discovery_v2'],
    );
    expect(run.code, run.stderr).toBe(0);
    // The agent asked capabilities/discoverV2 and lists what it found in a developer message of its own, each
    // root under an alias (`skill://<root id><path>`), each skill with its description and package.
    const texts = ((run.firstRequest.input ?? []) as { content?: { text?: string }[] }[]).flatMap((item) =>
      (item.content ?? []).map((part) => part.text ?? ''),
    );
    const listing = texts.find((text) => text.includes('(executor package: '));
    expect(listing, JSON.stringify(texts).slice(0, 4000)).toBeDefined();
    const roots = [
      `skill://codex-home-skills${join(profileHome, 'codex-home', 'skills')}`,
      `skill://user-agent-skills${join(profileHome, '.agents', 'skills')}`,
    ];
    roots.forEach((root, index) => {
      expect(listing).toContain(`- \`e${index}\` = \`${root}\``);
      const skill = EXECUTOR_SKILLS[index];
      expect(listing).toContain(`- ${skill?.name}: ${skill?.description} (executor package: e${index}/${skill?.name})`);
    });
  });

  it('gives the model the head, the tail and the full size of an output larger than the retention', async () => {
    const run = await runAgent([
      {
        type: 'call',
        name: 'exec_command',
        arguments: {
          cmd: `echo PPID=$PPID; head -c ${LARGE_BYTES} /dev/zero | tr '\\0' x; echo; echo END-MARK`,
          yield_time_ms: 10_000,
        },
      },
      { type: 'message', text: 'large done' },
    ]);
    expect(run.code, run.stderr).toBe(0);
    const output = run.outputs[0] ?? '';
    expectRanOnExecutor(output);
    expect(output).toContain('Process exited with code 0');
    // Codex counts a token per 4 bytes of everything the command printed: on our executor no byte goes
    // missing. Codex's own drops output its client has not taken when a busy machine slows that client
    // (seen on a loaded CI run: 573878 of 750006 tokens), so its column only has to stay within the total.
    const printed = `PPID=${/PPID=(\d+)/.exec(output)?.[1]}\n`.length + LARGE_BYTES + '\nEND-MARK\n'.length;
    const counted = Number(/Original token count: (\d+)/.exec(output)?.[1]);
    if (kind === 'tether') expect(counted).toBe(Math.ceil(printed / 4));
    else expect(counted).toBeGreaterThan(0);
    expect(counted).toBeLessThanOrEqual(Math.ceil(printed / 4));
    expect(output).toMatch(/PPID=\d+\nxxxx/);
    expect(output).toMatch(/xxxx\nEND-MARK\n$/);
  });

  /**
   * Starts an origin on 127.0.0.1 (it answers `origin says hi` and keeps each request's method and path, and its
   * Authorization header if any), then has the agent run `cmdFor(port)` under `-s workspace-write` with network
   * access and the managed network proxy (`proxyToml`: more `[features.network_proxy]` keys, then any other
   * tables): a command, or the arguments of one `exec_command` call each. The agent must exit 0 and every command
   * too; answers the commands' outputs as the model got them (`output`: the first), and what reached the origin.
   */
  async function runUnderProxy(
    cmdFor: (port: number) => string | Record<string, unknown>[],
    proxyToml: string,
  ): Promise<{ output: string; outputs: string[]; reached: string[] }> {
    const reached: string[] = [];
    const origin = createServer((req, res) => {
      const { authorization } = req.headers;
      reached.push(`${req.method} ${req.url}${authorization === undefined ? '' : ` ${authorization}`}`);
      res.end('origin says hi\n');
    });
    await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve));
    try {
      const cmd = cmdFor((origin.address() as AddressInfo).port);
      const calls = typeof cmd === 'string' ? [{ cmd }] : cmd;
      const run = await runAgent(
        [
          ...calls.map((call) => ({ type: 'call' as const, name: 'exec_command', arguments: call })),
          { type: 'message', text: 'proxy done' },
        ],
        ['-s', 'workspace-write'],
        `[sandbox_workspace_write]\nnetwork_access = true\n\n[features.network_proxy]\nenabled = true\n${proxyToml}`,
      );
      expect(run.code, run.stderr).toBe(0);
      expect(run.outputs).toHaveLength(calls.length);
      for (const output of run.outputs) expect(output).toContain('Process exited with code 0');
      return { output: run.outputs[0] ?? '', outputs: run.outputs, reached };
    } finally {
      origin.closeAllConnections();
      await new Promise((resolve) => origin.close(resolve));
    }
  }

  it('under workspace-write with the managed network proxy: an allowed loopback origin, a denied host, no way around', async () => {
    const { output, reached } = await runUnderProxy(
      (port) =>
        [
          `curl -sS --max-time 20 http://127.0.0.1:${port}/through-proxy`,
          `curl -s -o /dev/null --max-time 20 -w 'denied=%{http_code}\\n' http://denied.invalid/`,
          `curl -s --noproxy '*' --max-time 20 http://127.0.0.1:${port}/direct; echo "direct=$?"`,
        ].join('; '),
      'domains = { "127.0.0.1" = "allow", "denied.invalid" = "deny" }\n',
    );
    // Through the proxy to the allowed origin; the denied host answered 403 by it; direct egress refused.
    expect(output).toMatch(/Output:\norigin says hi\ndenied=403\ndirect=7\n$/);
    expect(reached).toEqual(['GET /through-proxy']);
  });

  it("with the managed proxy's transparent TCP: a command's own connects, proxy variables ignored, are intercepted and decided", async () => {
    const script = join(work, 'transparent-connects.cjs');
    writeFileSync(script, TRANSPARENT_CONNECTS);
    try {
      const { output, reached } = await runUnderProxy(
        (port) => `node ${script} ${port}`,
        'enable_socks5 = true\ntransparent_tcp = true\ndomains = { "localhost" = "allow", "denied.invalid" = "deny" }\n',
      );
      // A TEST-NET address and a denied name (given an address of the sandbox's resolver) connect and are reset
      // by the proxy's refusal (without transparent TCP: ENETUNREACH); the loopback is the sandbox's own; the
      // allowed name, resolved by the sandbox's resolver to an address standing for it, reaches the host's origin.
      expect(output).toMatch(
        /Output:\n203\.0\.113\.7 reset\ndenied\.invalid reset\n127\.0\.0\.1 ECONNREFUSED\nlocalhost is 198\.18\.\d+\.\d+\n198\.18\.\d+\.\d+ answered "origin says hi"\n$/,
      );
      expect(reached).toEqual(['GET /transparent']);
    } finally {
      rmSync(script, { force: true });
    }
  });

  it("with the managed proxy's credential masking: a bash -c command gets dummies, the real value reaches only its bound destination; a login shell is not masked", async () => {
    const tlsReached: string[] = [];
    const tlsOrigin = createHttpsServer(
      { key: readFileSync(originCerts.key), cert: readFileSync(originCerts.cert) },
      (req, res) => {
        tlsReached.push(`${req.method} ${req.url} ${req.headers.authorization}`);
        res.end('tls origin says hi\n');
      },
    );
    await new Promise<void>((resolve) => tlsOrigin.listen(0, '127.0.0.1', resolve));
    try {
      const tlsPort = (tlsOrigin.address() as AddressInfo).port;
      const show = 'echo "GITHUB_TOKEN=$GITHUB_TOKEN"; echo "SWAP_TOKEN=$SWAP_TOKEN"';
      const curl = (token: string, url: string) => `curl -sS --max-time 20 -H "Authorization: Bearer $${token}" ${url}`;
      const { outputs, reached } = await runUnderProxy(
        (port) => [
          {
            // `login: false` makes the agent start `/bin/bash -c CMD`, the only shape an executor masks.
            cmd: [
              show,
              curl('SWAP_TOKEN', `https://127.0.0.1:${tlsPort}/api/x`),
              curl('SWAP_TOKEN', `https://127.0.0.1:${tlsPort}/other`),
              curl('GITHUB_TOKEN', `http://127.0.0.1:${port}/elsewhere`),
            ].join('; '),
            login: false,
          },
          // The agent's default, `/bin/bash -lc CMD`: started unmasked (the executor logs why; the model is not told).
          { cmd: `${show}; echo "BROKER=\${CODEX_NETWORK_PROXY_CREDENTIAL_BROKER_ACTIVE:-unset}"` },
        ],
        [
          'domains = { "127.0.0.1" = "allow" }',
          '',
          '[features.network_proxy.credentials.swap]',
          'env = ["SWAP_TOKEN"]',
          'patterns = ["swp_[a-f0-9]{16}"]',
          `url_prefixes = ["https://127.0.0.1:${tlsPort}/api/"]`,
          '',
          '[features]',
          'credential_masking = true',
          '',
        ].join('\n'),
      );
      // Dummies: the GitHub token's prefix, `masked`, random letters and digits to the real value's length; one
      // the provider's pattern matches.
      const masked = new RegExp(
        `Output:\\nGITHUB_TOKEN=(ghp_masked[A-Za-z0-9]{${GITHUB_TOKEN.length - 10}})\\nSWAP_TOKEN=(swp_[a-f0-9]{16})\\n`,
      ).exec(outputs[0] ?? '');
      expect(masked, outputs[0]).not.toBeNull();
      const [, githubDummy, swapDummy] = masked ?? [];
      expect(swapDummy).not.toBe(SWAP_TOKEN);
      // The command's curl trusted the intercepting proxy's CA (the bundle masking names) and reached the origin.
      expect(outputs[0]).toMatch(/\ntls origin says hi\ntls origin says hi\norigin says hi\n$/);
      // The real value only where the credential is bound (that host and port, under /api/), the dummy elsewhere.
      expect(tlsReached).toEqual([`GET /api/x Bearer ${SWAP_TOKEN}`, `GET /other Bearer ${swapDummy}`]);
      expect(reached).toEqual([`GET /elsewhere Bearer ${githubDummy}`]);
      expect(outputs[1]).toMatch(
        new RegExp(`Output:\\nGITHUB_TOKEN=${GITHUB_TOKEN}\\nSWAP_TOKEN=${SWAP_TOKEN}\\nBROKER=unset\\n$`),
      );
    } finally {
      tlsOrigin.closeAllConnections();
      await new Promise((resolve) => tlsOrigin.close(resolve));
    }
  });
});
