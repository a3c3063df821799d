#!/usr/bin/env node
// Runs the pinned pnpm (package.json "packageManager") on a machine that has only Node and npm.
// Uses an installed pnpm of the same version when there is one, otherwise `npx pnpm@<version>`.
import { execFileSync, spawn } from 'node:child_process';
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
const child = spawn(cmd, [...prefix, ...process.argv.slice(2)], { stdio: 'inherit' });
// A signal for this process is its child's too (a terminal's Ctrl-C reaches both; a SIGTERM sent here only this
// one). Through npx the child is npm, which passes SIGINT and SIGTERM to a `sh -c pnpm` that dies of them and
// leaves pnpm to finish on its own.
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(signal, () => child.kill(signal));
child.once('error', (err) => {
  console.error(`pnpm: cannot run ${cmd}: ${err.message}`);
  process.exit(1);
});
child.once('exit', (code) => process.exit(code ?? 1));
