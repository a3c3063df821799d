/**
 * Every command line of the README and docs/ that runs one of the four CLIs names a command and flags that CLI
 * has now: each ```sh block is read line by line (comments and `\` continuations taken care of, pipelines and
 * `&&` chains split), and each `harness …`, `executor …`, `registry …`, `relay …` (or `node apps/APP/bin/APP.js
 * …`, `node apps/APP/dist/main.js …`) is walked through the program the binary builds (scripts/flags-table.ts):
 * its subcommands must exist and every option before `--` must be one of theirs. tests/e2e/readme-commands runs
 * the README's first things to try for real; this keeps every other example from drifting when a flag is
 * renamed.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { buildPrograms } from '../../scripts/flags-table.ts';

type Program = ReturnType<typeof buildPrograms>['harness'];
const APPS = ['harness', 'executor', 'registry', 'relay'] as const;
type App = (typeof APPS)[number];

/**
 * The shell lines of every ```sh block of a markdown text, continuations joined, comments dropped; and from
 * blocks without a language (usage synopses such as `harness exec [-t] [-i] -- COMMAND [ARGS…]`) the lines
 * that start with one of the CLIs, with the synopsis marks (`[`, `]`, `|`, `…`) taken out.
 */
function shellLines(text: string): string[] {
  const lines: string[] = [];
  for (const block of text.matchAll(/```(\w*)\n([\s\S]*?)```/g)) {
    const language = block[1] as string;
    if (!['sh', 'bash', 'shell', ''].includes(language)) continue;
    const joined = (block[2] as string).replace(/\\\n\s*/g, ' ');
    for (const line of joined.split('\n')) {
      const code = line.replace(/(^|\s)#.*$/, '').trim();
      if (language !== '') {
        if (code) lines.push(code);
        continue;
      }
      // A synopsis may set several commands side by side, two spaces or more apart.
      for (const part of code.split(/\s{2,}/)) {
        if (APPS.some((app) => part.startsWith(`${app} `)))
          lines.push(part.replace(/[[\]|…]/g, ' ').replace(/\s+/g, ' '));
      }
    }
  }
  return lines;
}

/** The invocations of our CLIs on a line: the app and its arguments (quotes kept whole, unquoted). */
function invocations(line: string): Array<{ app: App; args: string[] }> {
  const found: Array<{ app: App; args: string[] }> = [];
  for (const part of line.split(/\s*(?:&&|\|\||\||;|\$\(|\))\s*/)) {
    const words = [...part.matchAll(/'[^']*'|"[^"]*"|\S+/g)].map((m) => m[0].replace(/^['"]|['"]$/g, ''));
    let at = words.findIndex((w) => (APPS as readonly string[]).includes(w));
    let app = at >= 0 ? (words[at] as App) : null;
    const viaNode = words.findIndex(
      (w, i) => words[i - 1] === 'node' && /^apps\/(\w+)\/(bin\/\w+\.js|dist\/main\.js)$/.test(w),
    );
    if (viaNode >= 0 && (at < 0 || viaNode < at)) {
      at = viaNode;
      app = /^apps\/(\w+)\//.exec(words[viaNode] as string)?.[1] as App;
    }
    if (app === null || at < 0 || !(APPS as readonly string[]).includes(app)) continue;
    // `registry()` shell functions and `alias harness=…` define, they do not run.
    if (words[at + 1]?.startsWith('(') || words[at - 1] === 'alias') continue;
    found.push({ app, args: words.slice(at + 1).filter((w) => !/^[<>]|^\d?>/.test(w)) });
  }
  return found;
}

/** What is wrong with `args` for `program`: an unknown subcommand or option, or nothing. */
function problems(program: Program, args: string[]): string[] {
  const wrong: string[] = [];
  let command = program;
  const known = new Set<string>();
  const learn = (c: Program) => {
    for (const option of c.options) {
      if (option.long) known.add(option.long);
      if (option.short) known.add(option.short);
      if (option.negate && option.long) known.add(option.long);
    }
  };
  learn(command);
  known.add('--help').add('-h');
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    if (arg === '--') break;
    if (arg.startsWith('-') && arg !== '-') {
      const name = arg.split('=')[0] as string;
      // Bundled short flags (`-rp`) are each a flag.
      const names = /^-[a-zA-Z]{2,}$/.test(name) ? [...name.slice(1)].map((c) => `-${c}`) : [name];
      for (const n of names) if (!known.has(n)) wrong.push(`${command.name()}: unknown option ${n}`);
      continue;
    }
    const sub = command.commands.find((c) => c.name() === arg || c.aliases().includes(arg));
    if (sub) {
      command = sub as Program;
      learn(command);
    }
  }
  return wrong;
}

const docs = [
  'README.md',
  ...readdirSync(join(repoRoot(), 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => join('docs', name)),
];

describe('the CLI commands in the README and docs/', () => {
  const programs = buildPrograms();
  it.each(docs)('%s names only subcommands and flags the CLIs have', (doc) => {
    const text = readFileSync(join(repoRoot(), doc), 'utf8');
    const wrong: string[] = [];
    for (const line of shellLines(text)) {
      for (const { app, args } of invocations(line)) {
        for (const problem of problems(programs[app], args)) wrong.push(`${problem} in: ${line}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('finds the commands it checks', () => {
    const all = docs.flatMap((doc) => shellLines(readFileSync(join(repoRoot(), doc), 'utf8')).flatMap(invocations));
    // The README's first things to try and the docs' examples and synopses: each CLI is there.
    for (const app of APPS) expect(all.filter((i) => i.app === app).length, app).toBeGreaterThan(0);
    expect(all.length).toBeGreaterThan(30);
    expect(problems(programs.harness, ['exec', '--no-such-flag', '--', 'true'])).toEqual([
      'exec: unknown option --no-such-flag',
    ]);
  });
});
