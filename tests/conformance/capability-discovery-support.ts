// Skill trees for the capability-discovery conformance suite: SKILL.md and agents/openai.yaml variants that
// Codex 0.171.0 was probed with (findings-capability-discovery.md), written under one CODEX_HOME and HOME.

import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/** A SKILL.md with `yaml` as its front matter and a short body. */
export const skillMd = (yaml: string) => `---\n${yaml}\n---\n\nbody\n`;

/** Writes `content` at `root/relative`, making the directories. */
export function put(root: string, relative: string, content: string | Buffer): string {
  const path = join(root, relative);
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, content);
  return path;
}

/** A valid SKILL.md of exactly `bytes` bytes. */
function sized(bytes: number): string {
  const head = skillMd('name: big\ndescription: d');
  return head + 'x'.repeat(bytes - Buffer.byteLength(head));
}

/** SKILL.md texts by skill directory: valid, invalid, and the YAML Codex repairs or refuses. */
export const SKILL_FILES: Record<string, string | Buffer> = {
  plain: skillMd('name: plain\ndescription: a plain skill'),
  'no-name': skillMd('description: named after its directory'),
  'no-description': skillMd('name: c'),
  'no-front-matter': '# none\n',
  'name-64': skillMd(`name: ${'n'.repeat(64)}\ndescription: x`),
  'name-65': skillMd(`name: ${'n'.repeat(65)}\ndescription: x`),
  'name-64-chars': skillMd(`name: ${'é'.repeat(64)}\ndescription: x`),
  'long-description': skillMd(`name: long\ndescription: ${'d'.repeat(5000)}`),
  short: skillMd('name: short\ndescription: x\nmetadata:\n  short-description: "a\\nb   c"'),
  'short-number': skillMd('name: a\ndescription: x\nmetadata:\n  short-description: 5'),
  'short-blank': skillMd('name: a\ndescription: x\nmetadata:\n  short-description: "  "'),
  'short-list': skillMd('name: a\ndescription: x\nmetadata:\n  short-description: [a]'),
  'metadata-scalar': skillMd('name: a\ndescription: x\nmetadata: hello'),
  'metadata-duplicates': skillMd('name: a\ndescription: x\nmetadata:\n  a: 1\n  a: 2'),
  multiline: skillMd('name: multi\ndescription: |\n  line one\n  line two'),
  folded: skillMd('name: a\ndescription: >-\n  one\n  two\n\n  three'),
  whitespace: skillMd('description: "\\n  x  \\u00a0 y\\r\\n"\nname: "a\\u2028b"'),
  'plain-scalars': skillMd('name: 1.50\ndescription: true'),
  'null-name': skillMd('name: ~\ndescription: x'),
  'comment-name': skillMd('name: #hash\ndescription: x'),
  'blank-name': skillMd('name: "   "\ndescription: x'),
  'blank-description': skillMd('name: a\ndescription: "   "'),
  quoted: skillMd("name: 'it''s'\ndescription: \"q\""),
  anchor: skillMd('name: &x anc\ndescription: *x'),
  tagged: skillMd('name: !!str 12\ndescription: !custom x'),
  'duplicate-name': skillMd('name: a\nname: b\ndescription: x'),
  'colon-prose': skillMd('name: a: b\ndescription: Use when: asked # and: this'),
  'unclosed-flow': skillMd('name: [unclosed\ndescription: x'),
  'flow-map-name': skillMd('name: {a: b}\ndescription: {k: v}'),
  'sequence-name': skillMd('name: [a, b]\ndescription: x'),
  'map-and-sequence': skillMd('name: {a: b}\ndescription: [1, 2]'),
  'block-map-name': skillMd('name:\n  k: v\ndescription: x'),
  'bad-indent': skillMd('name: x\ndescription: y\n  bad: indent'),
  unterminated: skillMd('name: "unterminated\ndescription: x'),
  'unknown-alias': skillMd('name: a\ndescription: *nope'),
  'backtick-at': skillMd('name: "`a`"\ndescription: @x'),
  'sequence-document': '---\n- a\n- b\n---\n',
  'scalar-document': '---\njust text\n---\n',
  'flow-document': skillMd('{name: flow, description: whole}'),
  crlf: '---\r\nname: crlf\r\ndescription: c\r\n---\r\nbody\r\n',
  'cr-only': '---\rname: a\rdescription: x\r---\r',
  bom: `\ufeff${skillMd('name: x\ndescription: bom')}`,
  'blank-first-line': `\n${skillMd('name: y\ndescription: x')}`,
  'no-closing': '---\nname: a\ndescription: x\n',
  'closing-at-end': '---\nname: a\ndescription: x\n---',
  'dots-do-not-close': '---\nname: a\ndescription: x\n...\nbody',
  'trailing-spaces': '--- \nname: a\ndescription: x\n---  \n',
  'four-dashes': '----\nname: a\ndescription: x\n----\n',
  'empty-front-matter': '---\n---\n',
  'not-utf8': Buffer.from('---\nname: a\ndescription: x\xff\n---\n', 'latin1'),
  'largest-file': sized(1024 * 1024),
  'too-large-file': sized(1024 * 1024 + 1),
  lowercase: '',
};

/** agents/openai.yaml texts, each beside a valid SKILL.md in `yaml-<key>`. */
export const METADATA_FILES: Record<string, string> = {
  tools:
    'dependencies:\n  tools:\n    - type: mcp\n      value: foo\n      description: a tool\n      transport: stdio\n      command: foo-cmd\n      oauth_callback_port: 8080\n    - type: env_var\n      value: BAR\n',
  'tool-without-type': 'dependencies:\n  tools:\n    - value: x\n',
  'tool-long-type': `dependencies:\n  tools:\n    - type: ${'t'.repeat(65)}\n      value: v\n`,
  'tool-blank-fields':
    'dependencies:\n  tools:\n    - type: " m  c p "\n      value: "a\\nb"\n      description: "  "\n      url: https://x\n',
  'tool-scalars': 'dependencies:\n  tools:\n    - type: 5\n      value: true\n',
  'tools-null': 'dependencies:\n  tools:\n',
  policy: 'policy:\n  allow_implicit_invocation: false\n  products: [codex, chatgpt, atlas]\n',
  'policy-empty': 'policy: {}\n',
  'policy-uppercase': 'policy:\n  products: [CODEX, ATLAS]\n',
  'policy-titlecase': 'policy:\n  products: [Codex]\n',
  'policy-unknown-product': 'policy:\n  products: [nope]\n',
  'implicit-true': 'policy:\n  allow_implicit_invocation: True\n',
  'implicit-yes': 'policy:\n  allow_implicit_invocation: "yes"\n',
  'interface-only': 'interface:\n  display_name: D\n  short_description: not used\n',
  'interface-bad': 'interface: 5\npolicy: {}\n',
  'duplicate-top-level': 'policy: {}\npolicy: {}\n',
  'not-yaml': 'policy: [\n',
  empty: '',
};

/**
 * The skill roots of one machine: CODEX_HOME/skills with every variant above, plugin namespaces, depth,
 * hidden directories and symlinks; ~/.agents/skills with one skill. Answers the CODEX_HOME and HOME.
 */
export function writeSkillCorpus(base: string): { codexHome: string; home: string } {
  const codexHome = join(base, 'codex-home');
  const home = join(base, 'home');
  const skills = join(codexHome, 'skills');
  for (const [dir, text] of Object.entries(SKILL_FILES)) {
    if (dir === 'lowercase') put(skills, 'lowercase/skill.md', skillMd('name: lower\ndescription: x'));
    else put(skills, `${dir}/SKILL.md`, text);
  }
  for (const [key, yaml] of Object.entries(METADATA_FILES)) {
    put(skills, `yaml-${key}/SKILL.md`, skillMd(`name: yaml-${key}\ndescription: d`));
    put(skills, `yaml-${key}/agents/openai.yaml`, yaml);
  }
  put(skills, 'yaml-in-Agents/SKILL.md', skillMd('name: upper-agents\ndescription: d'));
  put(skills, 'yaml-in-Agents/Agents/openai.yaml', 'policy: {}\n');
  // Plugin namespaces: the nearest manifest names the skills below it.
  put(skills, 'plugin/.codex-plugin/plugin.json', '{"name":"outer"}');
  put(skills, 'plugin/SKILL.md', skillMd('name: at-plugin-root\ndescription: d'));
  put(skills, 'plugin/deep/x/SKILL.md', skillMd('name: deep\ndescription: d'));
  put(skills, 'plugin/deep/.claude-plugin/plugin.json', '{"name":"inner"}');
  put(skills, 'plugin/deep/y/z/SKILL.md', skillMd('name: nearest\ndescription: d'));
  put(skills, 'plugin/bad/.codex-plugin/plugin.json', 'not json');
  put(skills, 'plugin/bad/s/SKILL.md', skillMd('name: outer-applies\ndescription: d'));
  const manifests: Record<string, string> = {
    unnamed: '{"version":"1"}',
    spaced: '{"name":"  spaced  n "}',
    blank: '{"name":"  "}',
    number: '{"name":5}',
    null: '{"name":null}',
    'empty-array': '[]',
    array: '["from-array"]',
    string: '"s"',
    'twice-named': '{"name":"a","name":"b"}',
    'qualified-128': JSON.stringify({ name: 'n'.repeat(68) }),
    'qualified-129': JSON.stringify({ name: 'n'.repeat(69) }),
  };
  for (const [dir, manifest] of Object.entries(manifests)) {
    put(skills, `ns-${dir}/.codex-plugin/plugin.json`, manifest);
    put(skills, `ns-${dir}/s/SKILL.md`, skillMd(`name: ${'q'.repeat(60)}\ndescription: d`));
  }
  put(skills, 'ns-two/.codex-plugin/plugin.json', '{"name":"codex-first"}');
  put(skills, 'ns-two/.cursor-plugin/plugin.json', '{"name":"cursor"}');
  put(skills, 'ns-two/s/SKILL.md', skillMd('name: two\ndescription: d'));
  // Order (by URI: `%C3%A9` < `A` < `a-b/` < `a/`), depth, hidden directories, symlinks.
  for (const dir of ['order/a', 'order/a-b', 'order/é', 'order/A', 'order/a/x']) {
    put(skills, `${dir}/SKILL.md`, skillMd(`name: ${dir.replace('/', '-')}\ndescription: d`));
  }
  put(skills, '1/2/3/4/5/depth-6/SKILL.md', skillMd('name: depth-6\ndescription: d'));
  put(skills, '1/2/3/4/5/6/depth-7/SKILL.md', skillMd('name: depth-7\ndescription: d'));
  put(skills, '.hidden/h/SKILL.md', skillMd('name: hidden\ndescription: d'));
  put(skills, 'SKILL.md', skillMd('description: the root itself'));
  put(base, 'elsewhere/linked/SKILL.md', skillMd('name: linked-dir\ndescription: d'));
  symlinkSync(join(base, 'elsewhere/linked'), join(skills, 'linked-dir'));
  put(base, 'elsewhere/file.md', skillMd('name: linked-file\ndescription: d'));
  mkdirSync(join(skills, 'linked-file'));
  symlinkSync(join(base, 'elsewhere/file.md'), join(skills, 'linked-file/SKILL.md'));
  put(base, 'elsewhere/openai.yaml', 'policy:\n  allow_implicit_invocation: false\n');
  put(skills, 'linked-yaml/SKILL.md', skillMd('name: linked-yaml\ndescription: d'));
  mkdirSync(join(skills, 'linked-yaml/agents'));
  symlinkSync(join(base, 'elsewhere/openai.yaml'), join(skills, 'linked-yaml/agents/openai.yaml'));
  symlinkSync(join(base, 'nowhere'), join(skills, 'dangling'));
  put(home, '.agents/skills/from-agents/SKILL.md', skillMd('name: from-agents\ndescription: in ~/.agents'));
  return { codexHome, home };
}

/**
 * Roots for `capabilityRoots/discoverV1` under `base`, by id: plugins whose manifests declare their MCP and
 * apps configs well, badly or inline, nested plugin manifests, skills with and without openai.yaml, files over
 * 1 MiB or not UTF-8, a symlinked root, a file root.
 */
export function writeRootCorpus(base: string): Record<string, string> {
  const plugin = (dir: string, manifest: string, files: Record<string, string | Buffer> = {}) => {
    put(base, `${dir}/.codex-plugin/plugin.json`, manifest);
    for (const [relative, text] of Object.entries(files)) put(base, `${dir}/${relative}`, text);
  };
  const fallbacks = { '.mcp.json': '{"fallback":"mcp"}', '.app.json': '{"fallback":"apps"}' };
  plugin('declared', '{"name":"p","mcpServers":"./mcp/servers.json","apps":"./apps.json"}', {
    ...fallbacks,
    'mcp/servers.json': '{"mcpServers":{}}',
    'apps.json': '{"apps":{}}',
    'skills/one/SKILL.md': skillMd('name: one\ndescription: d'),
    'skills/one/agents/openai.yaml': 'policy: {}\n',
    'nested/.cursor-plugin/plugin.json': '{"name":"nested"}',
    'nested/.claude-plugin/plugin.json': '{"name":"second"}',
    'nested/two/SKILL.md': 'not parsed: no front matter',
  });
  plugin('defaults', '{"name":"d"}', fallbacks);
  plugin('inline', '{"mcpServers":{"a":{}},"apps":{"x":1}}', fallbacks);
  plugin('declared-missing', '{"mcpServers":"./nope.json","apps":"./dir"}', { ...fallbacks, 'dir/x': '1' });
  plugin('refused', '{"mcpServers":"../outside.json","apps":"./a/../apps.json"}', { ...fallbacks, 'apps.json': '{}' });
  plugin('not-strings', '{"mcpServers":5,"apps":["./apps.json"]}', { ...fallbacks, 'apps.json': '{}' });
  plugin('not-json', 'not json', fallbacks);
  plugin('big-manifest', JSON.stringify({ name: 'x', pad: 'x'.repeat(1024 * 1024) }));
  put(base, 'claude-only/.claude-plugin/plugin.json', '{"name":"c"}');
  put(base, 'claude-only/.mcp.json', '{}');
  put(base, 'outside.json', '{}');
  put(base, 'files/a/SKILL.md', skillMd('name: a\ndescription: d'));
  put(base, 'files/a/agents/openai.yaml', 'x'.repeat(1024 * 1024 + 1));
  put(base, 'files/b/SKILL.md', 'b');
  put(base, 'files/b/agents/openai.yaml', Buffer.from([0xc3]));
  put(base, 'files/c/SKILL.md', Buffer.from([0x61, 0xe2, 0x82]));
  put(base, 'files/d/SKILL.md', Buffer.from([0x61, 0x62, 0xf0, 0x28, 0x8c, 0x28]));
  put(base, 'files/e/SKILL.md', 'x'.repeat(1024 * 1024 + 1));
  put(base, 'files/.hidden/f/SKILL.md', 'hidden');
  put(base, 'files/1/2/3/4/5/depth-6/SKILL.md', '6');
  put(base, 'files/1/2/3/4/5/6/depth-7/SKILL.md', '7');
  put(base, 'elsewhere/linked/SKILL.md', 'linked');
  symlinkSync(join(base, 'elsewhere/linked'), join(base, 'files/linked'));
  symlinkSync(join(base, 'files'), join(base, 'files-link'));
  put(base, 'a-file', 'x');
  const ids = [
    'declared',
    'defaults',
    'inline',
    'declared-missing',
    'refused',
    'not-strings',
    'not-json',
    'big-manifest',
    'claude-only',
    'files',
    'files-link',
    'a-file',
    'missing',
  ];
  return Object.fromEntries(ids.map((id) => [id, join(base, id)]));
}

/** A `special` permission path (`root`, `project_roots`, …). */
export const special = (kind: string) => ({ type: 'special', value: { kind } });

/**
 * A sandbox context as Codex's agent sends it: a restricted filesystem of `entries`, network cut, for the
 * workspace `cwd` (null: none).
 */
export const restrictedTo = (entries: unknown[], cwd: string | null) => ({
  permissions: { type: 'managed', file_system: { type: 'restricted', entries }, network: 'restricted' },
  cwd,
  workspaceRoots: cwd === null ? [] : [cwd],
  windowsSandboxLevel: 'disabled',
});

/**
 * A Codex home's plugin cache (`plugins/cache/<marketplace>/<plugin>/<version>/`): several versions of one
 * plugin, manifests Codex reads or refuses, declared and conventional MCP/apps configs, nested manifests.
 */
export function writePluginCache(codexHome: string): void {
  const cache = join(codexHome, 'plugins/cache');
  const plugin = (at: string, manifest: string | null, files: Record<string, string> = {}) => {
    if (manifest !== null) put(cache, `${at}/.codex-plugin/plugin.json`, manifest);
    else mkdirSync(join(cache, at), { recursive: true });
    for (const [relative, text] of Object.entries(files)) put(cache, `${at}/${relative}`, text);
  };
  for (const version of ['1.0.0', '1.9.0', '1.10.0', '1.10.0-beta']) {
    plugin(`market/semver/${version}`, `{"name":"semver","version":"${version}"}`, {
      [`skills/v${version}/SKILL.md`]: skillMd(`name: at-${version}\ndescription: d`),
    });
  }
  for (const version of ['2.0.0', 'local']) plugin(`market/local/${version}`, '{"name":"local"}');
  plugin('market/renamed/1', '{"name":"manifest-name","interface":{"displayName":"  Shown   Name "}}', {
    'skills/a/SKILL.md': skillMd('name: a\ndescription: d'),
    'elsewhere/b/SKILL.md': skillMd('name: b\ndescription: d'),
    'sub/.claude-plugin/plugin.json': '{"name":"sub"}',
    'sub/c/SKILL.md': skillMd('name: c\ndescription: d'),
    'bad/SKILL.md': 'no front matter',
  });
  plugin('market/configs/1', '{"name":"configs","mcpServers":"./mcp.json","apps":"../apps.json"}', {
    'mcp.json': '{"mcpServers":{}}',
    '.app.json': '{"apps":{}}',
  });
  plugin('market/unnamed/0.1.0', '{"description":"no name"}', { '.mcp.json': '{}' });
  plugin('market/claude/1', null, { '.claude-plugin/plugin.json': '{"name":"claude"}' });
  plugin('market/no-manifest/1', null, { 'skills/s/SKILL.md': skillMd('name: s\ndescription: d') });
  plugin('market/not-json/1', 'not json');
  plugin('market/array/1', '["array"]');
  plugin('market/bad-interface/1', '{"name":"x","interface":{"displayName":5}}');
  plugin('market/newest-broken/1.0.0', '{"name":"ok"}');
  plugin('market/newest-broken/2.0.0', null);
  plugin('other-market/second/1', '{"name":"second"}');
  plugin('.hidden-market/h/1', '{"name":"h"}');
  plugin('market/.hidden-plugin/1', '{"name":"h"}');
  put(cache, 'market/a-file', 'x');
}
