// Deny globs (`glob_pattern` entries with access `deny`), differential: the same tree and the same deny on both
// executors (Codex's exec-server with its codex-linux-sandbox helper, bubblewrap on the host, and ours), and which
// files a workspace-write command can still read. Where Codex fails open, ours fails closed (CODEX-FINDINGS.md §21).

import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { sandboxAt, useSandboxScratch, workspaceWriteDenying } from './sandbox-support.ts';
import { KIND_CASES, useHarness } from './support.ts';

describe('sandbox: deny globs on both executors', { timeout: 120_000 }, () => {
  const h = useHarness();
  const { layout, run } = useSandboxScratch();
  const globResults = new Map<string, Record<string, unknown>>();

  // The tree each pattern is tried on. Codex expands the pattern with Rust's globset before launch.
  const GLOB_TREE = [
    'x/*.txt',
    'x/a.txt',
    'x/a',
    'x/b',
    'x/c',
    'x/d',
    'x/ab',
    'x/]',
    'x/?',
    'x/[',
    'x/sub/f',
    'x/{a,b}',
    'x/[a',
    'x/{a,b',
    'x/a\\',
    'k.key',
    'd/k.key',
    'd/e/k.key',
    'd/e/f/k.key',
    'd/.hidden/k.key',
    '.hidden/k.key',
    '.env',
    'a.env',
    'd/b.env',
    'q1.txt',
    'q12.txt',
    'q.txt',
  ];
  /**
   * Pattern (under the workspace unless it starts with `./`, read against the cwd) → the files ours denies, and
   * where Codex 0.171.0 denies something else, what it denies. Each such difference is Codex failing open (a
   * deny entry that denies nothing): ours denies what the pattern names instead.
   */
  const GLOB_CASES: Array<[pattern: string, denied: string[], codexFailsOpen?: string[]]> = [
    ['x/\\*.txt', ['x/*.txt']],
    ['x/[]a]', ['x/]', 'x/a']],
    ['x/[!]a]', ['x/?', 'x/[', 'x/b', 'x/c', 'x/d']],
    ['x/[a-c]', ['x/a', 'x/b', 'x/c']],
    ['x/\\?', ['x/?']],
    ['x/\\[', ['x/[']],
    ['x/[[]', ['x/[']],
    // An unclosed class is literal on both.
    ['x/[a', ['x/[a']],
    ['x/?', ['x/?', 'x/[', 'x/]', 'x/a', 'x/b', 'x/c', 'x/d']],
    // Every file right under x/, whatever its name holds.
    ['x/*', GLOB_TREE.filter((file) => /^x\/[^/]+$/.test(file))],
    ['x/*/f', ['x/sub/f']],
    ['x/a*', ['x/a', 'x/a.txt', 'x/a\\', 'x/ab']],
    ['**/k.key', ['.hidden/k.key', 'd/.hidden/k.key', 'd/e/f/k.key', 'd/e/k.key', 'd/k.key', 'k.key']],
    ['./**/k.key', ['.hidden/k.key', 'd/.hidden/k.key', 'd/e/f/k.key', 'd/e/k.key', 'd/k.key', 'k.key']],
    ['d/**/k.key', ['d/.hidden/k.key', 'd/e/f/k.key', 'd/e/k.key', 'd/k.key']],
    ['d/**', ['d/.hidden/k.key', 'd/b.env', 'd/e/f/k.key', 'd/e/k.key', 'd/k.key']],
    // `**` inside a component is `*` (globset's reading, so ours too).
    ['d/**k.key', ['d/k.key']],
    ['*.env', ['.env', 'a.env']],
    ['**/*.env', ['.env', 'a.env', 'd/b.env']],
    ['q?.txt', ['q1.txt']],
    // Codex denies nothing for any pattern with braces, nested or not, across a `/` or not, an empty
    // alternative, even an unclosed `{` (not even the file of that literal name), nor for a trailing `\`.
    ['x/{a,b}', ['x/a', 'x/b'], []],
    ['x/{a,{b,c}}', ['x/a', 'x/b', 'x/c'], []],
    ['{q,x/a}*.txt', ['q.txt', 'q1.txt', 'q12.txt', 'x/a.txt'], []],
    ['x/{,a}b', ['x/ab', 'x/b'], []],
    ['x/{a,b', ['x/{a,b'], []],
    ['x/a\\', ['x/a\\'], []],
  ];

  it.each(KIND_CASES)('%s: deny globs', async (_label, kind) => {
    const { client } = await h.session(kind, 'ws');
    const results: Record<string, unknown> = {};
    let n = 0;
    for (const [pattern] of GLOB_CASES) {
      const { root } = layout(kind);
      for (const file of GLOB_TREE) {
        mkdirSync(join(root, file, '..'), { recursive: true });
        writeFileSync(join(root, file), 'x');
      }
      const sandbox = sandboxAt(root, workspaceWriteDenying(pattern.startsWith('./') ? pattern : `${root}/${pattern}`));
      const script = `for f in ${GLOB_TREE.map((f) => `'${f}'`).join(' ')}; do cat -- "$f" >/dev/null 2>&1 || echo "DENIED:$f"; done`;
      const result = await run(client, `g${++n}`, script, root, {}, sandbox);
      results[pattern] =
        'startError' in result
          ? { startError: result.startError }
          : result.output
              .split('\n')
              .filter((l) => l.startsWith('DENIED:'))
              .map((l) => l.slice(7))
              .sort();
    }
    globResults.set(kind, results);
  });

  it.each(KIND_CASES)(
    '%s: a deny glob matching more than 8192 files is refused, not cut short',
    async (_label, kind) => {
      const { client } = await h.session(kind, 'ws');
      const { root } = layout(kind);
      mkdirSync(join(root, 'm'));
      for (let i = 0; i <= 8192; i++) writeFileSync(join(root, 'm', `f${i}.key`), 'x');
      const sandbox = sandboxAt(root, workspaceWriteDenying(`${root}/m/*.key`));
      const result = await run(client, 'many', 'cat m/f0.key m/f8192.key && echo READ', root, {}, sandbox);
      if (kind === 'codex') {
        // Codex starts the process, whose sandbox helper then fails before running the command.
        expect(result).toMatchObject({ exitCode: 1, sandboxDenied: true });
        expect((result as { output: string }).output).toMatch(/glob expansion for .* matched more than 8192 paths/);
      } else {
        expect(result).toEqual({
          startError: expect.objectContaining({ code: -32602, message: expect.stringMatching(/more than 8192 files/) }),
        });
      }
    },
    120_000,
  );

  it('deny globs: ours denies what each pattern names; codex the same, or nothing where it fails open', () => {
    const ours = Object.fromEntries(GLOB_CASES.map(([pattern, denied]) => [pattern, [...denied].sort()]));
    const codex = Object.fromEntries(
      GLOB_CASES.map(([pattern, denied, failsOpen]) => [pattern, [...(failsOpen ?? denied)].sort()]),
    );
    expect(globResults.get('tether')).toEqual(ours);
    expect(globResults.get('codex')).toEqual(codex);
    // Fail closed: whatever codex denies, ours denies too.
    for (const [pattern, denied] of Object.entries(globResults.get('codex') as Record<string, string[]>)) {
      expect(ours[pattern], pattern).toEqual(expect.arrayContaining(denied));
    }
  });
});
