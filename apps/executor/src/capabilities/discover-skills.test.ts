import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { readBounded } from './bounded-read.js';
import { discoverInstalled } from './discover-plugins.js';
import { utf8Problem } from './discover-roots.js';
import { discoverV2Answer } from './discover-skills.js';
import { manifestNamespace } from './plugin-manifest.js';
import { parseSkillFrontmatter, repairScalarFields } from './skill-file.js';
import { skillRoots } from './skill-roots.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});
function scratch(): string {
  const dir = mkdtempSync(join(tmpdir(), 'executor-skills-'));
  dirs.push(dir);
  return dir;
}
const skill = (name: string) => `---\nname: ${name}\ndescription: d\n---\nbody\n`;

describe('skill discovery on an untrusted disk', () => {
  // (The differential suite, tests/conformance/capability-discovery.test.ts, holds the parsing table.)
  it('does not block on a FIFO named openai.yaml or SKILL.md, and reads neither', async () => {
    const root = scratch();
    mkdirSync(join(root, 'piped/agents'), { recursive: true });
    writeFileSync(join(root, 'piped/SKILL.md'), skill('piped'));
    execFileSync('mkfifo', [join(root, 'piped/agents/openai.yaml'), join(root, 'fifo-skill.md')]);
    mkdirSync(join(root, 'fifo'));
    execFileSync('mv', [join(root, 'fifo-skill.md'), join(root, 'fifo/SKILL.md')]);
    const found = await discoverInstalled([{ id: 'test', path: root }], null);
    expect(found.skills.map((s) => [s.name, s.policy])).toEqual([['piped', null]]);
    expect(await readBounded(join(root, 'fifo/SKILL.md'), { followLinks: false })).toEqual({ kind: 'not-a-file' });
  });

  it('refuses a file past its cap or the budget without reading it', async () => {
    const root = scratch();
    writeFileSync(join(root, 'f'), 'x'.repeat(100));
    expect(await readBounded(join(root, 'f'), { max: 99, followLinks: false })).toEqual({
      kind: 'too-large',
      size: 100,
    });
    expect(await readBounded(join(root, 'f'), { budget: 99, followLinks: false })).toEqual({
      kind: 'over-budget',
      size: 100,
    });
    expect(await readBounded(join(root, 'nope'), { followLinks: false })).toEqual({ kind: 'missing' });
  });

  it('keeps the answer within 4 MiB and says so', () => {
    const big = 'd'.repeat(2_000_000);
    const entry = (name: string, description: string) => ({
      name,
      description,
      shortDescription: null,
      path: `file:///${name}`,
      discoveryRoot: { id: 'r', path: 'file:///' },
      dependencies: null,
      policy: null,
    });
    const answer = discoverV2Answer({
      plugins: [],
      skills: [entry('a', big), entry('b', big), entry('c', big), entry('d', 'small')],
      incompleteSources: 2,
      unresolvedLocations: false,
      pluginCacheTruncated: false,
    });
    expect(answer.skills.map((s) => s.name)).toEqual(['a', 'b', 'd']);
    expect(answer.warnings).toEqual([
      'capability discovery size limit reached',
      'some capability metadata could not be loaded; discovery may be incomplete',
      'some capability metadata could not be loaded; discovery may be incomplete',
    ]);
  });
});

describe('SKILL.md front matter', () => {
  it('quotes prose values that are not YAML, and nothing else', () => {
    expect(repairScalarFields('name: a\ndescription: Use when: asked # note')).toBe(
      "name: a\ndescription: 'Use when: asked' # note",
    );
    expect(repairScalarFields("name: [unclosed\nnote: it's")).toBe("name: '[unclosed'\nnote: it's");
    expect(repairScalarFields('name: [a, b]\ndescription: |\n  x: y')).toBeNull();
    expect(parseSkillFrontmatter('---\nname: a: b\ndescription: c\n---\n', 'dir')).toEqual({
      name: 'a: b',
      description: 'c',
      shortDescription: null,
    });
  });

  it('names a skill after its directory, and refuses a missing description or a long name', () => {
    expect(parseSkillFrontmatter('---\ndescription: "  x\\n y "\n---\n', 'my-dir').name).toBe('my-dir');
    expect(() => parseSkillFrontmatter('---\nname: a\n---\n', 'd')).toThrow('missing field `description`');
    expect(() => parseSkillFrontmatter(`---\nname: ${'é'.repeat(65)}\ndescription: d\n---\n`, 'd')).toThrow(
      'exceeds maximum length of 64 characters',
    );
    expect(() => parseSkillFrontmatter('\ufeff---\nname: a\ndescription: d\n---\n', 'd')).toThrow('frontmatter');
  });
});

describe('plugin namespaces and skill roots', () => {
  it('takes a manifest’s name raw, the directory’s when blank, none when it is not a string', () => {
    const ns = (text: string) => manifestNamespace({ path: '/p/.codex-plugin/plugin.json', text }, '/x/plug');
    expect(ns('{"name":" a b "}')).toBe(' a b ');
    expect(ns('{"name":"  "}')).toBe('plug');
    expect(ns('{}')).toBe('plug');
    expect(ns('{"name":5}')).toBeNull();
    expect(ns('{"name":"a","n":{"name":"x"},"name":"b"}')).toBeNull();
    expect(ns('{"n":{"name":"x"},"name":"b"}')).toBe('b');
    expect(ns('not json')).toBeNull();
  });

  it('lists the Codex home, ~/.agents and /etc/codex skill roots, each path once', () => {
    const home = scratch();
    expect(skillRoots({ env: { CODEX_HOME: home, HOME: home }, systemDir: '/etc/codex' }).roots).toEqual([
      { id: 'codex-home-skills', path: join(home, 'skills') },
      { id: 'user-agent-skills', path: join(home, '.agents/skills') },
      { id: 'system-skills', path: '/etc/codex/skills' },
    ]);
    mkdirSync(join(home, '.agents'));
    expect(skillRoots({ env: { CODEX_HOME: join(home, '.agents'), HOME: home } }).roots.map((r) => r.id)).toEqual([
      'codex-home-skills',
      'system-skills',
    ]);
  });
});

describe('utf8Problem', () => {
  it('words invalid UTF-8 as Rust’s Utf8Error does', () => {
    const problem = (bytes: number[]) => utf8Problem(Uint8Array.from(bytes));
    expect(problem([0x61, 0xc3, 0xa9])).toBeNull();
    expect(problem([0xc3])).toBe('incomplete utf-8 byte sequence from index 0');
    expect(problem([0x61, 0xe2, 0x82])).toBe('incomplete utf-8 byte sequence from index 1');
    expect(problem([0x61, 0x62, 0xf0, 0x28, 0x8c])).toBe('invalid utf-8 sequence of 1 bytes from index 2');
    expect(problem([0xe2, 0x82, 0x28])).toBe('invalid utf-8 sequence of 2 bytes from index 0');
    expect(problem([0xed, 0xa0, 0x80])).toBe('invalid utf-8 sequence of 1 bytes from index 0');
    expect(problem([0xff])).toBe('invalid utf-8 sequence of 1 bytes from index 0');
  });
});
