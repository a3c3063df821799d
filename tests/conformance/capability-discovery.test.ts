// Capability discovery (`capabilities/discoverV2`, `capabilityRoots/discoverV1`), differential: the same requests, over the same temp
// CODEX_HOME, HOME and skill trees, to Codex's exec-server and ours, whose answers must be equal
// (findings-capability-discovery.md). The trees hold only temp paths both see alike, so nothing is normalised.
// A few facts of each answer are checked outright too, so that two equally wrong answers do not pass.

import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { fileUri, type RpcResponse } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  put,
  restrictedTo,
  skillMd,
  special,
  writePluginCache,
  writeRootCorpus,
  writeSkillCorpus,
} from './capability-discovery-support.ts';
import { PEER_KINDS, TRANSPORTS, useHarness } from './support.ts';

const INCOMPLETE = 'some capability metadata could not be loaded; discovery may be incomplete';
const SIZE_LIMIT = 'capability discovery size limit reached';

interface Skill {
  name: string;
  description: string;
  shortDescription: string | null;
  path: string;
  discoveryRoot: { id: string; path: string };
  dependencies: unknown;
  policy: unknown;
}
interface Discovery {
  plugins: unknown[];
  skills: Skill[];
  warnings: string[];
}

describe.each(TRANSPORTS)('capabilities/discoverV2 over %s', (transport) => {
  const h = useHarness();
  let counter = 0;
  /** A fresh directory for one scenario's trees. */
  const scenario = (name: string) => {
    const dir = join(h.workDir, `discovery-${transport}-${++counter}-${name}`);
    mkdirSync(dir, { recursive: true });
    return dir;
  };

  /** `method` with `params` on a fresh session of each executor (`env` over each one's); both answers. */
  async function onBoth(env: Record<string, string>, method: string, params: unknown) {
    const answers: Record<string, Omit<RpcResponse, 'id'>> = {};
    for (const kind of PEER_KINDS) {
      const { client } = await h.session(kind, transport, { env });
      const { id: _id, ...answer } = await client.request(method, params, { timeoutMs: 60_000 });
      answers[kind] = answer;
    }
    expect(answers.tether, 'our answer against Codex’s').toEqual(answers.codex);
    return answers.codex as { result?: Discovery; error?: { code: number; message: string } };
  }
  const discover = (env: Record<string, string>, params: unknown = { cwd: fileUri(h.workDir) }) =>
    onBoth(env, 'capabilities/discoverV2', params);

  it('is advertised, with the sandbox capability, and gated like Codex', async () => {
    for (const kind of PEER_KINDS) {
      const peer = await h.start(kind, transport);
      const client = await h.connect(peer);
      expect((await client.request('capabilities/discoverV2', { cwd: 'file:///' })).error).toEqual({
        code: -32600,
        message: 'client must call initialize before using capability discovery methods',
      });
      const { initializeResult } = await h.session(kind, transport);
      const info = initializeResult.environmentInfo as { capabilities: Record<string, unknown> };
      expect(info.capabilities).toMatchObject({ capabilityDiscoveryV2: true, capabilityDiscoverySandbox: true });
    }
  });

  it('finds the Codex home’s and ~/.agents’ skills, reading SKILL.md and openai.yaml as Codex does', async () => {
    const { codexHome, home } = writeSkillCorpus(scenario('corpus'));
    const { result } = await discover({ CODEX_HOME: codexHome, HOME: home });
    const byName = new Map(result!.skills.map((skill) => [skill.name, skill]));
    expect(result!.plugins).toEqual([]);
    expect(result!.warnings).toEqual([INCOMPLETE]);
    expect(byName.get('plain')).toEqual({
      name: 'plain',
      description: 'a plain skill',
      shortDescription: null,
      path: fileUri(join(codexHome, 'skills/plain/SKILL.md')),
      discoveryRoot: { id: 'codex-home-skills', path: fileUri(join(codexHome, 'skills')) },
      dependencies: null,
      policy: null,
    });
    expect(byName.get('from-agents')?.discoveryRoot).toEqual({
      id: 'user-agent-skills',
      path: fileUri(join(home, '.agents/skills')),
    });
    expect(byName.get('yaml-policy')?.policy).toEqual({
      allowImplicitInvocation: false,
      products: ['codex', 'chatgpt', 'atlas'],
    });
    expect(byName.get('a: b')?.description).toBe('Use when: asked');
    expect([...byName.keys()]).toEqual(expect.arrayContaining(['no-name', 'outer:at-plugin-root', 'inner:nearest']));
    for (const absent of ['c', 'depth-7', 'lower', 'linked-file', 'n'.repeat(65)])
      expect(byName.has(absent)).toBe(false);
    // Root by root, each sorted by SKILL.md URI.
    const paths = result!.skills.filter((s) => s.discoveryRoot.id === 'codex-home-skills').map((s) => s.path);
    expect(paths).toEqual([...paths].sort());
    expect(result!.skills.at(-1)?.name).toBe('from-agents');
  });

  it('lists the plugins of the Codex home’s plugin cache as Codex does', async () => {
    const codexHome = join(scenario('plugins'), 'codex-home');
    writePluginCache(codexHome);
    const { result } = await discover({ CODEX_HOME: codexHome, HOME: h.workDir });
    const plugins = result!.plugins as { id: string; version: string; displayName: string; skills: Skill[] }[];
    expect(plugins.map((p) => [p.id, p.version])).toEqual([
      ['claude@market', '1'],
      ['configs@market', '1'],
      ['local@market', 'local'],
      ['renamed@market', '1'],
      ['second@other-market', '1'],
      ['semver@market', '1.10.0'],
      ['unnamed@market', '0.1.0'],
    ]);
    const renamed = plugins.find((p) => p.id === 'renamed@market')!;
    expect(renamed.displayName).toBe('Shown   Name');
    expect(renamed.skills.map((s) => s.name)).toEqual(['manifest-name:b', 'manifest-name:a', 'sub:c']);
    // One warning for each plugin that was left out or is incomplete.
    expect(result!.warnings).toEqual(Array(7).fill(INCOMPLETE));
  });

  it('reads the disk anew for each request, and a CODEX_HOME given through a symlink canonicalized', async () => {
    const base = scenario('fresh');
    const codexHome = join(base, 'codex-home');
    put(codexHome, 'skills/first/SKILL.md', skillMd('name: first\ndescription: d'));
    symlinkSync(codexHome, join(base, 'link'));
    const env = { CODEX_HOME: join(base, 'link'), HOME: join(base, 'home') };
    expect((await discover(env)).result!.skills.map((s) => s.name)).toEqual(['first']);
    put(codexHome, 'skills/added/SKILL.md', skillMd('name: added\ndescription: d'));
    const { result } = await discover(env);
    expect(result!.skills.map((s) => s.name)).toEqual(['added', 'first']);
    expect(result!.skills[0]!.discoveryRoot.path).toBe(fileUri(join(codexHome, 'skills')));
  });

  it('answers bad params and a missing CODEX_HOME with Codex’s errors', async () => {
    const env = { CODEX_HOME: scenario('params'), HOME: h.workDir };
    const bad: unknown[] = [
      {},
      { cwd: null },
      { cwd: 5 },
      { cwd: 'relative/path' },
      { cwd: '/not/a/uri' },
      { cwd: 'http://x/y' },
      { cwd: 'file:///', sandbox: 'x' },
      { cwd: 'file:///', sandbox: { foo: 1 } },
      null,
    ];
    for (const params of bad) expect((await discover(env, params)).error?.code, JSON.stringify(params)).toBe(-32602);
    // Another host's file URI, or a cwd that does not exist, is not looked at.
    expect((await discover(env, { cwd: 'file://host/x' })).result?.skills).toEqual([]);
    const missing = join(h.workDir, 'no-such-codex-home');
    expect((await discover({ CODEX_HOME: missing, HOME: h.workDir })).error).toEqual({
      code: -32603,
      message: `CODEX_HOME points to ${JSON.stringify(missing)}, but that path does not exist`,
    });
  });

  it('searches a root named twice once, and follows a root that is a symlink', async () => {
    const base = scenario('roots');
    const home = join(base, 'home');
    put(home, '.agents/skills/shared/SKILL.md', skillMd('name: shared\ndescription: d'));
    const overlap = await discover({ CODEX_HOME: join(home, '.agents'), HOME: home });
    expect(overlap.result!.skills.map((s) => s.discoveryRoot.id)).toEqual(['codex-home-skills']);
    const linkedHome = join(base, 'linked-home');
    mkdirSync(linkedHome);
    symlinkSync(join(home, '.agents'), join(linkedHome, '.agents'));
    mkdirSync(join(base, 'empty-codex-home'));
    const followed = await discover({ CODEX_HOME: join(base, 'empty-codex-home'), HOME: linkedHome });
    expect(followed.result!.skills.map((s) => s.path)).toEqual([
      fileUri(join(linkedHome, '.agents/skills/shared/SKILL.md')),
    ]);
  });
});

// The bounds, on one transport: they cost a large tree each.
describe('capabilities/discoverV2: bounds', { timeout: 120_000 }, () => {
  const h = useHarness();
  const onBoth = async (codexHome: string) => {
    const answers: Record<string, unknown> = {};
    for (const kind of PEER_KINDS) {
      const { client } = await h.session(kind, 'ws', { env: { CODEX_HOME: codexHome, HOME: h.workDir } });
      answers[kind] = await client.call('capabilities/discoverV2', { cwd: fileUri(h.workDir) }, { timeoutMs: 60_000 });
    }
    expect(answers.tether, 'our answer against Codex’s').toEqual(answers.codex);
    return answers.codex as Discovery;
  };
  const home = (name: string) => {
    const dir = join(h.workDir, name);
    mkdirSync(join(dir, 'skills'), { recursive: true });
    return dir;
  };
  const pad = (name: string, total: number) => {
    const head = skillMd(`name: ${name}\ndescription: d`);
    return head + 'x'.repeat(total - Buffer.byteLength(head));
  };

  it('walks at most 2000 directories of a root', async () => {
    const codexHome = home('walk-limit');
    for (let i = 0; i < 2001; i++) put(codexHome, `skills/s${i}/SKILL.md`, skillMd(`name: s${i}\ndescription: d`));
    const result = await onBoth(codexHome);
    expect(result.skills).toHaveLength(1999);
    expect(result.warnings).toEqual([INCOMPLETE]);
  });

  it('reads at most 16 MiB of a root, skipping what would pass it', async () => {
    const codexHome = home('read-budget');
    const mib = 1024 * 1024;
    for (let i = 0; i < 15; i++) put(codexHome, `skills/s${String(i).padStart(2, '0')}/SKILL.md`, pad(`s${i}`, mib));
    put(codexHome, 'skills/s15/SKILL.md', pad('fills', mib - 50));
    put(codexHome, 'skills/s16/SKILL.md', pad('skipped', 100));
    put(codexHome, 'skills/s17/SKILL.md', pad('fits-after', 50));
    const result = await onBoth(codexHome);
    expect(result.skills).toHaveLength(17);
    expect(result.skills.map((s) => s.name).slice(-3)).toEqual(['s14', 'fills', 'fits-after']);
    expect(result.warnings).toEqual([INCOMPLETE]);
  });

  it('answers at most 4 MiB, leaving out the skills that would pass it', async () => {
    const codexHome = home('answer-budget');
    for (let i = 0; i < 5; i++) {
      put(codexHome, `skills/a${i}/SKILL.md`, skillMd(`name: n${i}\ndescription: ${'d'.repeat(1_000_000)}`));
    }
    put(codexHome, 'skills/z/SKILL.md', skillMd('name: tiny\ndescription: d'));
    const result = await onBoth(codexHome);
    expect(result.skills.map((s) => s.name)).toEqual(['n0', 'n1', 'n2', 'n3', 'tiny']);
    expect(result.warnings).toEqual([SIZE_LIMIT]);
  });

  it('reads at most 512 plugins, the first by id', async () => {
    const codexHome = home('plugin-limit');
    for (const market of ['a', 'b']) {
      for (let i = 0; i < 257; i++) {
        put(codexHome, `plugins/cache/${market}/p${String(i).padStart(3, '0')}/1/.codex-plugin/plugin.json`, '{}');
      }
    }
    const result = await onBoth(codexHome);
    const ids = (result.plugins as { id: string }[]).map((p) => p.id);
    expect(ids).toHaveLength(512);
    expect(ids.at(-1)).toBe('p255@b');
    expect(result.warnings).toEqual(['some capability locations could not be resolved; discovery may be incomplete']);
  });

  it('counts the plugins first against the 4 MiB', async () => {
    const codexHome = home('answer-budget-plugins');
    const description = 'd'.repeat(1_000_000);
    put(codexHome, 'plugins/cache/m/p/1/.codex-plugin/plugin.json', '{"name":"p"}');
    for (let i = 0; i < 3; i++) {
      put(codexHome, `plugins/cache/m/p/1/skills/s${i}/SKILL.md`, skillMd(`name: s${i}\ndescription: ${description}`));
      put(codexHome, `skills/h${i}/SKILL.md`, skillMd(`name: h${i}\ndescription: ${description}`));
    }
    const result = await onBoth(codexHome);
    expect((result.plugins as { skills: unknown[] }[]).map((p) => p.skills.length)).toEqual([3]);
    expect(result.skills.map((s) => s.name)).toEqual(['h0']);
    expect(result.warnings).toEqual([SIZE_LIMIT]);
  });
});

// Under a sandbox (Codex's runs the discovery in its fs sandbox helper, ours in its own): what the policy
// hides is not read. Outside /tmp, as the sandbox suites are.
describe('capabilities/discoverV2: sandbox', { timeout: 120_000 }, () => {
  const h = useHarness();
  // Named now (the profiles name its paths), made before the first test and removed after the last.
  const base = join('/var/tmp', `tether-discovery-${randomUUID()}`);
  const codexHome = join(base, 'codex-home');
  const skills = join(codexHome, 'skills');
  const work = join(base, 'work');
  beforeAll(() => {
    mkdirSync(join(work, '.git'), { recursive: true });
    for (const name of ['first', 'second']) put(skills, `${name}/SKILL.md`, skillMd(`name: ${name}\ndescription: d`));
    put(skills, 'second/agents/openai.yaml', 'policy:\n  allow_implicit_invocation: true\n');
    put(base, 'outside/linked/SKILL.md', skillMd('name: linked\ndescription: d'));
    symlinkSync(join(base, 'outside/linked'), join(skills, 'linked'));
    put(base, 'home/.agents/skills/agent/SKILL.md', skillMd('name: agent\ndescription: d'));
  });
  afterAll(() => rmSync(base, { recursive: true, force: true }));

  const context = (entries: unknown[]) => restrictedTo(entries, fileUri(work));
  const readRoot = { path: special('root'), access: 'read' };
  const path = (p: string, access: string) => ({ path: { type: 'path', path: fileUri(p) }, access });
  const PROFILES: Record<string, { sandbox: unknown; skills: string; warned: boolean }> = {
    'read-only': { sandbox: context([readRoot]), skills: 'first linked second+policy agent', warned: false },
    'skills root denied': { sandbox: context([readRoot, path(skills, 'deny')]), skills: 'agent', warned: true },
    'one skill denied': {
      sandbox: context([readRoot, path(join(skills, 'first'), 'deny')]),
      skills: 'linked second+policy agent',
      warned: true,
    },
    'openai.yaml denied': {
      sandbox: context([readRoot, path(join(skills, 'second/agents/openai.yaml'), 'deny')]),
      skills: 'first linked second agent',
      warned: true,
    },
    'symlink target denied': {
      sandbox: context([readRoot, path(join(base, 'outside'), 'deny')]),
      skills: 'first second+policy agent',
      warned: false,
    },
    'only the Codex home readable, not the cwd': {
      sandbox: context([path(codexHome, 'read')]),
      skills: 'first second+policy',
      warned: false,
    },
    'only the project readable': {
      sandbox: context([{ path: special('project_roots'), access: 'read' }]),
      skills: '',
      warned: false,
    },
    'SKILL.md denied by a glob': {
      sandbox: context([readRoot, { path: { type: 'glob_pattern', pattern: `${skills}/*/SKILL.md` }, access: 'deny' }]),
      skills: 'linked agent',
      warned: true,
    },
  };

  it.each(Object.keys(PROFILES))('%s', async (profile) => {
    const { sandbox, skills: expected, warned } = PROFILES[profile]!;
    const answers: Record<string, unknown> = {};
    for (const kind of PEER_KINDS) {
      const { client } = await h.session(kind, 'ws', { env: { CODEX_HOME: codexHome, HOME: join(base, 'home') } });
      answers[kind] = await client.request('capabilities/discoverV2', { cwd: fileUri(work), sandbox });
    }
    const { id: _a, ...codex } = answers.codex as RpcResponse<Discovery>;
    const { id: _b, ...tether } = answers.tether as RpcResponse<Discovery>;
    expect(tether, 'our answer against Codex’s').toEqual(codex);
    const names = codex.result!.skills.map((s) => s.name + (s.policy ? '+policy' : ''));
    expect(names.join(' ')).toBe(expected);
    expect(codex.result!.warnings).toEqual(warned ? [INCOMPLETE] : []);
  });
});

interface RootAnswer {
  id: string;
  path: string;
  plugin: {
    manifest: { path: string };
    mcpConfig: { path: string } | null;
    appsConfig: { path: string } | null;
  } | null;
  skills: { instructions: { path: string; contents: string }; metadata: { path: string } | null }[];
  namespaceManifests: { path: string }[];
  warnings: string[];
  error: string | null;
}

describe.each(TRANSPORTS)('capabilityRoots/discoverV1 over %s', (transport) => {
  const h = useHarness();
  /** `params` on a fresh session of each executor; both answers must be equal. */
  async function onBoth(params: unknown, env: Record<string, string> = {}) {
    const answers: Record<string, unknown> = {};
    for (const kind of PEER_KINDS) {
      const { client } = await h.session(kind, transport, { env });
      const { id: _id, ...answer } = await client.request('capabilityRoots/discoverV1', params, { timeoutMs: 60_000 });
      answers[kind] = answer;
    }
    expect(answers.tether, 'our answer against Codex’s').toEqual(answers.codex);
    return answers.codex as { result?: { roots: RootAnswer[] }; error?: { code: number; message: string } };
  }

  it('is gated like Codex', async () => {
    for (const kind of PEER_KINDS) {
      const client = await h.connect(await h.start(kind, transport));
      expect((await client.request('capabilityRoots/discoverV1', { roots: [] })).error).toEqual({
        code: -32600,
        message: 'client must call initialize before using capability discovery methods',
      });
    }
  });

  it('materializes each root’s plugin files, namespace manifests and skills as Codex does', async () => {
    const base = join(h.workDir, `roots-${transport}`);
    const roots = writeRootCorpus(base);
    const params = { roots: Object.entries(roots).map(([id, path]) => ({ id, path: fileUri(path) })) };
    params.roots.push({ id: 'declared', path: `${fileUri(roots.declared!)}/` }, { id: 'host', path: 'file://host/x' });
    const { result } = await onBoth(params);
    const byId = new Map(result!.roots.map((root) => [root.id, root]));
    const declared = byId.get('declared')!;
    expect(declared.plugin?.mcpConfig?.path).toBe(fileUri(join(roots.declared!, 'mcp/servers.json')));
    expect(declared.namespaceManifests.map((m) => m.path)).toEqual([
      fileUri(join(roots.declared!, '.codex-plugin/plugin.json')),
      fileUri(join(roots.declared!, 'nested/.claude-plugin/plugin.json')),
    ]);
    expect(declared.skills.map((skill) => skill.instructions.contents)).toContain('not parsed: no front matter');
    expect(byId.get('refused')?.warnings).toEqual([
      `ignoring mcpServers in ${fileUri(join(roots.refused!, '.codex-plugin/plugin.json'))}: path must start with \`./\``,
      `ignoring apps in ${fileUri(join(roots.refused!, '.codex-plugin/plugin.json'))}: path must remain below the capability root`,
    ]);
    expect(byId.get('a-file')?.error).toBe(`capability root ${fileUri(roots['a-file']!)} is not a directory`);
    expect(byId.get('missing')?.error).toBe(
      `failed to inspect capability root ${fileUri(roots.missing!)}: No such file or directory (os error 2)`,
    );
    expect(byId.get('files')?.warnings).toContain(
      `capability file ${fileUri(join(roots.files!, 'd/SKILL.md'))} is not UTF-8: invalid utf-8 sequence of 1 bytes from index 2`,
    );
  });

  it('answers bad params with Codex’s errors', async () => {
    const many = Array.from({ length: 129 }, (_, i) => ({ id: `r${i}`, path: 'file:///nope' }));
    expect((await onBoth({ roots: many })).error?.code).toBe(-32600);
    for (const params of [{}, { roots: [{ path: 'file:///' }] }, { roots: [{ id: 'x', path: 'relative' }] }]) {
      expect((await onBoth(params)).error?.code, JSON.stringify(params)).toBe(-32602);
    }
    const dynamicWithoutCwd = restrictedTo([{ path: special('project_roots'), access: 'read' }], null);
    const error = await onBoth({ roots: [{ id: 'x', path: fileUri(h.workDir), sandbox: dynamicWithoutCwd }] });
    expect(error.error?.message).toBe('file system sandbox context with dynamic permissions requires cwd');
  });
});

describe('capabilityRoots/discoverV1: bounds and sandboxes', { timeout: 120_000 }, () => {
  const h = useHarness();
  let base = '';
  beforeAll(() => {
    base = mkdtempSync('/var/tmp/tether-roots-');
  });
  afterAll(() => rmSync(base, { recursive: true, force: true }));
  const onBoth = async (roots: unknown[]) => {
    const answers: Record<string, unknown> = {};
    for (const kind of PEER_KINDS) {
      const { client } = await h.session(kind, 'ws');
      answers[kind] = await client.call('capabilityRoots/discoverV1', { roots }, { timeoutMs: 60_000 });
    }
    expect(answers.tether, 'our answer against Codex’s').toEqual(answers.codex);
    return (answers.codex as { roots: RootAnswer[] }).roots;
  };

  it('walks 2000 directories and materializes 16 MiB of a root, skipping what would pass it', async () => {
    const mib = 1024 * 1024;
    for (let i = 0; i < 2001; i++) put(base, `walk/s${i}/SKILL.md`, 'x');
    put(base, 'bundle/.codex-plugin/plugin.json', '{"name":"b","mcpServers":"./m.json"}');
    put(base, 'bundle/m.json', '{}');
    for (let i = 0; i < 16; i++) put(base, `bundle/s${String(i).padStart(2, '0')}/SKILL.md`, 'x'.repeat(mib));
    put(base, 'bundle/s16/SKILL.md', 'small enough to fit after the one left out');
    const [walk, bundle] = await onBoth([
      { id: 'walk', path: fileUri(join(base, 'walk')) },
      { id: 'bundle', path: fileUri(join(base, 'bundle')) },
    ]);
    expect(walk!.skills).toHaveLength(1999);
    expect(walk!.warnings).toEqual([
      `capability scan reached its traversal limit (root: ${fileUri(join(base, 'walk'))})`,
    ]);
    // The manifest and m.json leave too little for s15; s16 still fits.
    expect(bundle!.skills.map((skill) => skill.instructions.path.split('/').at(-2))).toEqual([
      ...Array.from({ length: 15 }, (_, i) => `s${String(i).padStart(2, '0')}`),
      's16',
    ]);
    expect(bundle!.warnings).toEqual(['capability root bundle exceeds the 16777216-byte limit']);
  });

  it('discovers each root under its own sandbox', async () => {
    put(base, 'sb/a/SKILL.md', 'a');
    put(base, 'sb/b/SKILL.md', 'b');
    put(base, 'sb/b/agents/openai.yaml', 'policy: {}\n');
    const root = fileUri(join(base, 'sb'));
    const context = (entries: unknown[]) => restrictedTo(entries, fileUri(base));
    const readAll = { path: special('root'), access: 'read' };
    const deny = (p: string) => ({ path: { type: 'path', path: fileUri(join(base, p)) }, access: 'deny' });
    const answers = await onBoth([
      { id: 'free', path: root },
      { id: 'deny-b', path: root, sandbox: context([readAll, deny('sb/b')]) },
      { id: 'deny-root', path: root, sandbox: context([readAll, deny('sb')]) },
      { id: 'deny-yaml', path: root, sandbox: context([readAll, deny('sb/b/agents/openai.yaml')]) },
      { id: 'deny-md', path: root, sandbox: context([readAll, deny('sb/a/SKILL.md')]) },
      {
        id: 'hidden',
        path: root,
        sandbox: context([{ path: { type: 'path', path: fileUri('/usr') }, access: 'read' }]),
      },
    ]);
    const skills = (id: string) => answers.find((a) => a.id === id)!.skills.map((s) => s.instructions.contents);
    expect(skills('free')).toEqual(['a', 'b']);
    expect(skills('deny-b')).toEqual(['a']);
    expect(skills('deny-root')).toEqual([]);
    expect(answers.find((a) => a.id === 'hidden')!.error).toMatch(/No such file or directory/);
  });
});
