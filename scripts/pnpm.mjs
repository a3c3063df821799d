#!/usr/bin/env node
// Runs the pinned pnpm (package.json "packageManager") on a machine that has only Node and npm.
// Uses an installed pnpm of the same version when there is one, otherwise `npx pnpm@<version>`.
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

const pinned = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')).packageManager;
const version = pinned.replace(/^pnpm@/, '');
let cmd = 'npx';
let prefix = ['--yes', `pnpm@${version}`];
try {
  if (
    execFileSync('pnpm', ['--version'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim() === version
  ) {
    cmd = 'pnpm';
    prefix = [];
  }
} catch {
  // no pnpm on PATH: npx fetches the pinned one
}
const result = spawnSync(cmd, [...prefix, ...process.argv.slice(2)], { stdio: 'inherit' });
process.exit(result.status ?? 1);
