import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** Every `` `file` › "title" `` of SECURITY.md (a later `; › "title"` on the same line names the same file). */
function references(text: string): Array<{ file: string; title: string; line: number }> {
  const found: Array<{ file: string; title: string; line: number }> = [];
  text.split('\n').forEach((line, index) => {
    let file: string | null = null;
    for (const match of line.matchAll(/(?:`([^`]+\.test\.ts)`\s*)?› "([^"]+)"/g)) {
      file = match[1] ?? file;
      if (file) found.push({ file, title: match[2] as string, line: index + 1 });
    }
  });
  return found;
}

describe('SECURITY.md', () => {
  const text = readFileSync(join(ROOT, 'SECURITY.md'), 'utf8');
  const refs = references(text);

  it('points its promises at tests', () => {
    expect(refs.length).toBeGreaterThan(40);
  });

  it('names only tests that exist: each file is there and holds the title', () => {
    const missing = refs.filter(({ file, title }) => {
      const path = join(ROOT, file);
      return !existsSync(path) || !readFileSync(path, 'utf8').includes(title);
    });
    expect(missing.map((r) => `SECURITY.md:${r.line}: ${r.file} › "${r.title}"`)).toEqual([]);
  });
});
