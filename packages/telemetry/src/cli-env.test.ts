import { InvalidArgumentError, Option } from 'commander';
import { afterEach, describe, expect, it } from 'vitest';
import {
  Deprecations,
  type EnvScheme,
  envVarName,
  flagRows,
  flagsTable,
  logOptions,
  packageVersion,
  SchemeCommand,
} from './cli-env.js';
import { durationArg } from './cli-values.js';

const SCHEME: EnvScheme = {
  app: 'demo',
  deprecatedVariables: { '--listen': ['OLD_LISTEN'], '--log-format': ['TETHER_LOG_FORMAT'] },
  renamedFlags: { '--wait-ms': '--wait', 'serve --addr': '--listen' },
  flagAliases: { '--remote': '--registry' },
  secrets: ['--token'],
  withoutVariables: { once: 'an argument', 'serve --note': 'a note' },
  variables: [{ name: 'TETHER_DEMO_KEY', what: 'a key', commands: ['serve'], secret: true, deprecated: ['OLD_KEY'] }],
};

/** The process environment the programs read (a fresh object per test). */
let env: NodeJS.ProcessEnv = {};
function setEnv(values: Record<string, string>) {
  Object.assign(env, values);
}
afterEach(() => {
  env = {};
});

function program() {
  let out = '';
  let err = '';
  let seen: Record<string, unknown> | null = null;
  const root = new SchemeCommand('demo', SCHEME, { env })
    .exitOverride()
    .configureOutput({ writeOut: (t) => (out += t), writeErr: (t) => (err += t) });
  const serve = root
    .command('serve')
    .exitOverride()
    .addOption(new Option('--listen <addr>', 'where').default('127.0.0.1:1'))
    .addOption(
      new Option('--port <n>', 'a number').argParser((v) => {
        if (!/^\d+$/.test(v)) throw new InvalidArgumentError('expected digits');
        return Number(v);
      }),
    )
    .addOption(
      new Option('--token <secret>', 'a secret').argParser((v) => {
        if (v.length < 8) throw new InvalidArgumentError('too short');
        return v;
      }),
    )
    .addOption(new Option('--verbose', 'a boolean'))
    .addOption(new Option('--no-color', 'a negated boolean'))
    .addOption(new Option('--note <text>', 'no variable'))
    .addOption(new Option('--wait <duration>', 'a duration').argParser(durationArg({ bare: 'ms' })))
    .addOption(new Option('--registry <url>', 'where to register; --remote is the same'))
    .addOption(new Option('--tag <tag>', 'repeatable').argParser((v, p: string[]) => [...p, v]).default([]))
    .addOption(new Option('--size <n>', 'a size (default 42)'))
    .addOption(new Option('--database <url>', 'mandatory').makeOptionMandatory());
  for (const option of logOptions()) serve.addOption(option);
  serve.action((options: Record<string, unknown>) => {
    seen = options;
  });
  root
    .command('once')
    .exitOverride()
    .option('--label <text>', 'an argument')
    .option('--port <n>', 'a port that is a flag here')
    .action(() => {});
  const run = async (...args: string[]) => {
    try {
      await root.parseAsync(args, { from: 'user' });
      return { ok: true as const, options: seen, out, err };
    } catch (error) {
      return { ok: false as const, error: error as Error, out, err };
    }
  };
  return { root, run };
}

describe('the flag and variable scheme', () => {
  it('names a variable after the app and the long flag', () => {
    expect(envVarName('registry', '--database')).toBe('TETHER_REGISTRY_DATABASE');
    expect(envVarName('executor', '--no-forward')).toBe('TETHER_EXECUTOR_NO_FORWARD');
    expect(envVarName('harness', '--connect-timeout')).toBe('TETHER_HARNESS_CONNECT_TIMEOUT');
  });

  it('gives every long flag its variable, except where the scheme says why not', () => {
    const rows = flagRows(program().root);
    expect(Object.fromEntries(rows.map((r) => [r.flag, r.variable]))).toMatchObject({
      '--listen <addr>': 'TETHER_DEMO_LISTEN',
      '--verbose': 'TETHER_DEMO_VERBOSE',
      '--no-color': 'TETHER_DEMO_NO_COLOR',
      '--database <url>': 'TETHER_DEMO_DATABASE',
      '--note <text>': null,
      '--label <text>': null,
    });
    expect(rows.find((r) => r.flag.startsWith('--note'))?.without).toBe('a note');
    expect(rows.find((r) => r.flag.startsWith('--listen'))?.deprecated).toEqual([
      '--addr',
      'OLD_LISTEN',
      'TETHER_DEMO_ADDR',
    ]);
    expect(rows.find((r) => r.flag.startsWith('--wait'))?.deprecated).toEqual(['--wait-ms', 'TETHER_DEMO_WAIT_MS']);
    expect(rows.find((r) => r.flag.startsWith('--registry'))?.also).toEqual(['--remote']);
    expect(rows.some((r) => r.flag.startsWith('--wait-ms') || r.flag.startsWith('--remote'))).toBe(false);
    const table = flagsTable([program().root]);
    expect(table).toContain('| demo | `--token <secret>` | `TETHER_DEMO_TOKEN` (secret) |  |  | serve |');
    expect(table).toContain('| demo | `--note <text>` | — (a note) |');
    expect(table).toContain('| demo | `--registry <url>` | `TETHER_DEMO_REGISTRY` | `--remote` |  | serve |');
    expect(table).toContain('| demo | — (a key) | `TETHER_DEMO_KEY` (secret) |  | `OLD_KEY` | serve |');
  });

  it('reads a variable; a flag beats it; the scheme variable beats an alias', async () => {
    setEnv({
      TETHER_DEMO_DATABASE: 'db',
      TETHER_DEMO_LISTEN: 'from-env',
      OLD_LISTEN: 'from-alias',
      TETHER_DEMO_PORT: '7',
    });
    expect((await program().run('serve')).options).toMatchObject({ database: 'db', listen: 'from-env', port: 7 });
    expect((await program().run('serve', '--listen', 'from-flag')).options).toMatchObject({ listen: 'from-flag' });
    delete env.TETHER_DEMO_LISTEN;
    const old = await program().run('serve');
    expect(old.options).toMatchObject({ listen: 'from-alias' });
    expect(old.err).toBe('demo: warning: OLD_LISTEN is deprecated; use TETHER_DEMO_LISTEN\n');
    setEnv({ TETHER_LOG_FORMAT: 'json' });
    expect((await program().run('serve')).options).toMatchObject({ logFormat: 'json', logLevel: 'info' });
    // An empty variable counts as unset, the scheme's as an older name's.
    setEnv({ TETHER_DEMO_LISTEN: '', OLD_LISTEN: '', TETHER_DEMO_PORT: '' });
    const empty = await program().run('serve');
    expect(empty.options).toMatchObject({ listen: '127.0.0.1:1' });
    expect(empty.options?.port).toBeUndefined();
  });

  it('reads a boolean variable as 1/true/yes or 0/false/no, and refuses anything else', async () => {
    setEnv({ TETHER_DEMO_DATABASE: 'db', TETHER_DEMO_VERBOSE: '0', TETHER_DEMO_NO_COLOR: 'yes' });
    expect((await program().run('serve')).options).toMatchObject({ color: false });
    expect((await program().run('serve')).options?.verbose).toBeUndefined();
    setEnv({ TETHER_DEMO_VERBOSE: 'true' });
    expect((await program().run('serve')).options).toMatchObject({ verbose: true });
    setEnv({ TETHER_DEMO_VERBOSE: 'maybe' });
    const bad = await program().run('serve');
    expect(bad.ok).toBe(false);
    expect(bad.err).toMatch(/TETHER_DEMO_VERBOSE.*Expected 1\/true\/yes or 0\/false\/no/);
  });

  it('says which variable is invalid, and never shows a secret', async () => {
    setEnv({ TETHER_DEMO_DATABASE: 'db', TETHER_DEMO_PORT: 'x1' });
    expect((await program().run('serve')).err).toMatch(/value 'x1' from env 'TETHER_DEMO_PORT' is invalid/);
    delete env.TETHER_DEMO_PORT;
    setEnv({ TETHER_DEMO_TOKEN: 'short' });
    const fromEnv = await program().run('serve');
    expect(fromEnv.ok).toBe(false);
    expect(fromEnv.err).toContain("option '--token <secret>' is invalid (value not shown). too short");
    expect(fromEnv.err).not.toContain("'short'");
    delete env.TETHER_DEMO_TOKEN;
    const fromFlag = await program().run('serve', '--token', 'tiny');
    expect(fromFlag.err).toContain('(value not shown)');
    expect(fromFlag.err).not.toContain('tiny');
    setEnv({ TETHER_DEMO_TOKEN: 'a-long-secret-value' });
    const help = await program().run('serve', '--help');
    expect(help.out).toContain('TETHER_DEMO_TOKEN');
    expect(help.out).not.toContain('a-long-secret-value');
  });

  it('a mandatory flag may come from its variable; a flag outside the scheme reads none', async () => {
    expect((await program().run('serve')).err).toContain("required option '--database <url>' not specified");
    setEnv({ TETHER_DEMO_DATABASE: 'db', TETHER_DEMO_NOTE: 'ignored', TETHER_DEMO_LABEL: 'ignored' });
    expect((await program().run('serve')).options?.note).toBeUndefined();
  });

  it('refuses an option that names another variable, and a secret with a default', () => {
    const root = new SchemeCommand('demo', SCHEME);
    expect(() => root.addOption(new Option('--listen <a>').env('LISTEN'))).toThrow(/TETHER_DEMO_LISTEN/);
    expect(() => root.addOption(new Option('--token <t>').default('x'))).toThrow(/must not have a default/);
  });

  it('takes a renamed flag and its variable with one deprecation line each; the new spelling wins', async () => {
    setEnv({ TETHER_DEMO_DATABASE: 'db' });
    const old = await program().run('serve', '--wait-ms', '250', '--addr', 'h:1');
    expect(old.options).toMatchObject({ wait: 250, listen: 'h:1' });
    expect(old.options?.waitMs).toBeUndefined();
    expect(old.err).toBe(
      'demo: warning: --addr is deprecated; use --listen\ndemo: warning: --wait-ms is deprecated; use --wait\n',
    );
    const both = await program().run('serve', '--wait', '2s', '--wait-ms', '250');
    expect(both.options).toMatchObject({ wait: 2000 });
    setEnv({ TETHER_DEMO_WAIT_MS: '1500' });
    const fromVariable = await program().run('serve');
    expect(fromVariable.options).toMatchObject({ wait: 1500 });
    expect(fromVariable.err).toBe('demo: warning: TETHER_DEMO_WAIT_MS is deprecated; use TETHER_DEMO_WAIT\n');
    setEnv({ TETHER_DEMO_WAIT: '1m' });
    const scheme = await program().run('serve');
    expect(scheme.options).toMatchObject({ wait: 60_000 });
    expect(scheme.err).toBe('');
    const help = await program().run('serve', '--help');
    expect(help.out).not.toContain('--wait-ms');
    expect(help.out).not.toContain('--addr');
  });

  it('takes another program’s spelling of a flag without a line', async () => {
    setEnv({ TETHER_DEMO_DATABASE: 'db' });
    const codex = await program().run('serve', '--remote', 'http://r');
    expect(codex.options).toMatchObject({ registry: 'http://r' });
    expect(codex.err).toBe('');
  });

  it('takes a subcommand’s flags before its name as after it', async () => {
    const before = await program().run('--database', 'db', '--port=7', '--verbose', 'serve', '--listen', 'x:1');
    expect(before.options).toMatchObject({ database: 'db', port: 7, verbose: true, listen: 'x:1' });
    // A value that is a command's name is still the value.
    expect((await program().run('--database', 'serve', 'serve')).options).toMatchObject({ database: 'serve' });
    // --port takes a value in both commands that have it; a flag no command knows is refused as before.
    expect((await program().run('--port', '8', 'serve', '--database', 'db')).options).toMatchObject({ port: 8 });
    const unknown = await program().run('--nope', 'serve');
    expect(unknown.ok).toBe(false);
    expect(unknown.err).toContain("unknown option '--nope'");
    // The program's own flags stay where they are.
    expect((await program().run('--help', 'serve')).out).toContain('Usage: demo [options] [command]');
  });

  it('names each default once in --help, and the variable once', async () => {
    const help = (await program().run('serve', '--help')).out.replace(/\s+/g, ' ');
    expect(help).toContain('--listen <addr> where (default: 127.0.0.1:1, env: TETHER_DEMO_LISTEN)');
    expect(help).toContain('--size <n> a size (default: 42, env: TETHER_DEMO_SIZE)');
    expect(help).toContain('--tag <tag> repeatable (env: TETHER_DEMO_TAG)');
    expect(help).toContain('--verbose a boolean (env: TETHER_DEMO_VERBOSE)');
    expect(help).toContain('(choices: auto, json, pretty, default: auto, env: TETHER_DEMO_LOG_FORMAT)');
    expect(help).not.toMatch(/\) \(|default: \[\]|default: \{\}|default: false/);
  });

  it('says each deprecation once a run, and holds the lines until flushed', () => {
    const lines: string[] = [];
    const deprecations = new Deprecations('demo', (line) => lines.push(line));
    deprecations.warn('OLD', 'NEW');
    deprecations.warn('OLD', 'NEW');
    deprecations.hold();
    deprecations.warn('--old', '--new', 'a note');
    deprecations.warnNow('URGENT', 'NEW_URGENT');
    expect(lines).toEqual([
      'demo: warning: OLD is deprecated; use NEW\n',
      'demo: warning: URGENT is deprecated; use NEW_URGENT\n',
    ]);
    deprecations.flush();
    deprecations.warn('LATER', 'NOW');
    expect(lines.slice(2)).toEqual([
      'demo: warning: --old is deprecated; use --new (a note)\n',
      'demo: warning: LATER is deprecated; use NOW\n',
    ]);
    expect(deprecations.names).toEqual(['OLD', '--old', 'URGENT', 'LATER']);
  });

  it('finds the version in the package.json of the named package above a module', () => {
    expect(packageVersion(import.meta.url, '@tether/telemetry')).toMatch(/^\d+\.\d+\.\d+/);
    expect(() => packageVersion(import.meta.url, '@tether/nothing-like-it')).toThrow(/cannot find the package.json/);
  });
});
