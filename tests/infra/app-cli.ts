/**
 * What the built apps accept, read from their own `--help` (the real bins under apps/<app>/bin), and the
 * app invocations written in deployment files (compose services, Kubernetes containers), so that the
 * infra tests can hold every flag and TETHER_* variable there against what the app really takes.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '@tether/test-kit';

const root = repoRoot();
export const APPS = ['registry', 'relay', 'executor', 'harness'] as const;
export type App = (typeof APPS)[number];

const helpCache = new Map<string, string>();

/** `<app> [subcommand…] --help`, stdout and stderr, from the built app. */
export function appHelp(app: string, subcommand: readonly string[] = []): string {
  const key = [app, ...subcommand].join(' ');
  const cached = helpCache.get(key);
  if (cached !== undefined) return cached;
  const bin = join(root, 'apps', app, 'bin', `${app}.js`);
  if (!existsSync(bin)) throw new Error(`apps/${app}/bin/${app}.js is missing`);
  const run = spawnSync(process.execPath, [bin, ...subcommand, '--help'], { encoding: 'utf8' });
  if (run.status !== 0) throw new Error(`${key} --help exited ${run.status}: ${run.stderr}`);
  const text = `${run.stdout}${run.stderr}`;
  helpCache.set(key, text);
  return text;
}

/** Every `--flag` the help text names (exactly: `--relay` is not `--relay-url`). */
export function flagsIn(help: string): Set<string> {
  return new Set([...help.matchAll(/(?<![\w-])(--[a-z0-9][a-z0-9-]*)/g)].map((m) => m[1] as string));
}

/** Every TETHER_* variable the help text names. */
export function tetherVariablesIn(help: string): Set<string> {
  return new Set([...help.matchAll(/\bTETHER_[A-Z0-9_]+\b/g)].map((m) => m[0]));
}

export interface Invocation {
  app: string;
  /** The subcommand path (`serve`, `keys create`), empty for the executor and harness. */
  subcommand: string[];
  args: string[];
}

/** Subcommands of the apps that have them: the path is taken from the leading words that are one. */
const SUBCOMMANDS: Record<string, string[]> = {
  registry: ['serve', 'keys', 'create', 'list', 'revoke'],
  relay: ['serve'],
};

/**
 * Every `node apps/<app>/dist/main.js ARGS…` in a command line or shell script: a script's continuation
 * lines are joined, the arguments end at the end of the line, a `;`, `&&`, `|` or a redirection, and quotes
 * around an argument are dropped.
 */
export function invocations(text: string): Invocation[] {
  const joined = text.replace(/\\\n/g, ' ');
  const found: Invocation[] = [];
  for (const match of joined.matchAll(/node apps\/(\w+)\/dist\/main\.js([^\n]*)/g)) {
    const app = match[1] as string;
    const args: string[] = [];
    for (const token of (match[2] ?? '').trim().split(/\s+/).filter(Boolean)) {
      if (/^(;|&&|\|\|?|\d?[<>])/.test(token)) break;
      args.push(token.replace(/^"(.*)"$/, '$1').replace(/^'(.*)'$/, '$1'));
    }
    const subcommand: string[] = [];
    for (const arg of args) {
      if (!(SUBCOMMANDS[app] ?? []).includes(arg)) break;
      subcommand.push(arg);
    }
    found.push({ app, subcommand, args: args.slice(subcommand.length) });
  }
  return found;
}

/** The `--flags` of an invocation that its app (and subcommand) does not accept. */
export function unknownFlags(invocation: Invocation): string[] {
  const accepted = flagsIn(appHelp(invocation.app, invocation.subcommand));
  return invocation.args
    .filter((arg) => arg.startsWith('--'))
    .map((arg) => arg.split('=')[0] as string)
    .filter((flag) => !accepted.has(flag));
}

/** The TETHER_* variables among `names` that none of the apps invoked reads (per their help). */
export function unknownTetherVariables(names: Iterable<string>, used: readonly Invocation[]): string[] {
  const known = new Set<string>();
  for (const invocation of used) {
    for (const name of tetherVariablesIn(appHelp(invocation.app, invocation.subcommand))) known.add(name);
    for (const name of tetherVariablesIn(appHelp(invocation.app))) known.add(name);
  }
  return [...names].filter((name) => name.startsWith('TETHER_') && !known.has(name));
}

/** TETHER_* variables set inline in a script (`TETHER_X="…" exec …`, `export TETHER_X=…`). */
export function inlineTetherVariables(text: string): string[] {
  return [...text.matchAll(/\b(TETHER_[A-Z0-9_]+)=/g)].map((m) => m[1] as string);
}
