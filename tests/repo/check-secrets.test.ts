import { spawnSync } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const SCRIPT = join(ROOT, 'scripts/check-secrets.mjs');

function check(repo: string, ...args: string[]) {
  const result = spawnSync(process.execPath, [SCRIPT, '--repo', repo, ...args], { encoding: 'utf8' });
  return { status: result.status, out: result.stdout, err: result.stderr };
}

const dirs: string[] = [];
function repoWith(files: Record<string, string>, { stage = true } = {}): string {
  const dir = mkdtempSync(join(tmpdir(), 'tether-secrets-'));
  dirs.push(dir);
  const git = (...args: string[]) => {
    const result = spawnSync('git', ['-C', dir, ...args], { encoding: 'utf8' });
    if (result.status !== 0) throw new Error(result.stderr);
  };
  git('init', '-q');
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  if (stage) git('add', '-A');
  return dir;
}

afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe('scripts/check-secrets.mjs (the CI check for committed keys and tokens)', () => {
  it('finds nothing in this repository', () => {
    const result = check(ROOT);
    expect(result.err).toBe('');
    expect(result.status).toBe(0);
    expect(result.out).toMatch(/files clean/);
  });

  it('fails on a tracked private key and names the file, never the key', () => {
    const pem = generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
    const body = pem.split('\n')[1] as string;
    const result = check(repoWith({ 'notes.txt': 'hello\n', 'signing.pem': pem }));
    expect(result.status).toBe(1);
    expect(result.err).toContain('signing.pem:1: private key (PEM)');
    expect(result.err).not.toContain('notes.txt');
    expect(result.err).not.toContain(body);
  });

  it('fails on a registry API key or harness authorization in any tracked file', () => {
    const token = `treg_${randomBytes(32).toString('base64url')}`;
    const authorization = `thka_${randomBytes(32).toString('base64url')}`;
    const result = check(
      repoWith({ 'config.env': `X=1\nTETHER_HARNESS_API_KEY=${token}\n`, 'log.txt': authorization }),
    );
    expect(result.status).toBe(1);
    expect(result.err).toContain('config.env:2: Tether API key');
    expect(result.err).toContain('log.txt:1: Tether harness authorization');
    expect(result.err).not.toContain(token);
  });

  it('fails on a tracked key file whatever it holds, and passes elided samples', () => {
    const result = check(repoWith({ 'harness.key': 'x\n', 'README.md': 'TETHER_HARNESS_API_KEY=treg_…\n' }));
    expect(result.status).toBe(1);
    expect(result.err).toContain('harness.key: a key file is tracked');
    expect(result.err).not.toContain('README.md');
    expect(check(repoWith({ 'README.md': 'TETHER_HARNESS_API_KEY=treg_…\n' })).status).toBe(0);
  });

  it('with --staged looks at what would be committed, not at untracked files', () => {
    const token = `treg_${randomBytes(32).toString('base64url')}`;
    const dir = repoWith({ 'a.txt': 'fine\n' });
    writeFileSync(join(dir, 'untracked.txt'), token);
    expect(check(dir, '--staged').status).toBe(0);
    expect(check(dir).status).toBe(0);
    spawnSync('git', ['-C', dir, 'add', 'untracked.txt']);
    expect(check(dir, '--staged').status).toBe(1);
  });
});
