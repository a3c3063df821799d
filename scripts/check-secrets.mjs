#!/usr/bin/env node
// Fails when a file git tracks (or is about to commit) holds a private key or an API token.
//
//   node scripts/check-secrets.mjs [--repo DIR] [--staged]
//
// Scans the tracked files' working copies (with --staged: the index, so a pre-commit hook sees what would be
// committed). Looks for PEM/OpenSSH private-key blocks and tokens in the shapes Tether's registry issues
// (`treg_…` API keys, `thka_…` harness authorizations: a prefix and 43 base64url characters) and a few
// well-known third-party ones. Tests generate their keys and tokens at run time, so a match is a leak, not a
// fixture; a deliberate sample (documentation) must be shortened or elided so that it does not parse as one.
// Exit 0 when clean, 1 with one line per finding (file:line and the kind, never the secret itself), 2 on misuse.
import { spawnSync } from 'node:child_process';
import { readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    repo: { type: 'string', default: '.' },
    staged: { type: 'boolean', default: false },
    help: { type: 'boolean' },
  },
});
if (values.help) {
  process.stdout.write('usage: node scripts/check-secrets.mjs [--repo DIR] [--staged]\n');
  process.exit(0);
}
const repo = resolve(values.repo);

// Built from parts so that this file does not match itself.
const BEGIN = '-----' + 'BEGIN';
const PATTERNS = [
  { kind: 'private key (PEM)', re: new RegExp(`${BEGIN} (?:[A-Z0-9]+ )*PRIVATE KEY-----`) },
  { kind: 'Tether API key', re: /\btreg_[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])/ },
  { kind: 'Tether harness authorization', re: /\bthka_[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])/ },
  { kind: 'OpenAI API key', re: /\bsk-(?:proj-)?[A-Za-z0-9_-]{40,}/ },
  { kind: 'GitHub token', re: /\bgh[pousr]_[A-Za-z0-9]{36}\b/ },
  { kind: 'AWS access key id', re: /\bAKIA[0-9A-Z]{16}\b/ },
];
// Files that hold only these names are flagged whatever their content: the registry's signing key and the
// stack's key files.
const SECRET_FILE = /(?:^|\/)(?:relay-signing-key\.pem|(?:admin|executor|harness|relay)\.key)$/;
const MAX_BYTES = 8 * 1024 * 1024;

function git(args) {
  const result = spawnSync('git', ['-C', repo, ...args], { maxBuffer: 256 * 1024 * 1024 });
  if (result.status !== 0) {
    process.stderr.write(`check-secrets: git ${args.join(' ')} failed: ${result.stderr.toString().trim()}\n`);
    process.exit(2);
  }
  return result.stdout;
}

const files = git(values.staged ? ['diff', '--cached', '--name-only', '-z', '--diff-filter=ACMR'] : ['ls-files', '-z'])
  .toString('utf8')
  .split('\0')
  .filter(Boolean);

const findings = [];
for (const file of files) {
  if (SECRET_FILE.test(file)) findings.push(`${file}: a key file is tracked`);
  let text;
  try {
    if (values.staged) {
      text = git(['show', `:${file}`]);
    } else {
      const path = join(repo, file);
      const stat = statSync(path, { throwIfNoEntry: false });
      if (!stat?.isFile()) continue; // deleted in the working tree, a submodule or a symlink
      text = readFileSync(path);
    }
  } catch {
    continue;
  }
  if (text.byteLength > MAX_BYTES || text.includes(0)) continue; // binary or huge: not text we write secrets in
  const lines = text.toString('utf8').split('\n');
  lines.forEach((line, index) => {
    for (const { kind, re } of PATTERNS) if (re.test(line)) findings.push(`${file}:${index + 1}: ${kind}`);
  });
}

if (findings.length > 0) {
  process.stderr.write(`check-secrets: ${findings.length} finding(s); remove them and rotate what leaked:\n`);
  for (const finding of findings) process.stderr.write(`  ${finding}\n`);
  process.exit(1);
}
process.stdout.write(`check-secrets: ${files.length} files clean\n`);
