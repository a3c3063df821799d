import { InvalidArgumentError, Option } from 'commander';
import { afterEach, describe, expect, it } from 'vitest';
import {
  type EnvScheme,
  envVarName,
  flagRows,
  flagsTable,
  logOptions,
  packageVersion,
  SchemeCommand,
} from './cli-env.js';

const SCHEME: EnvScheme = {
  app: 'demo',
  aliases: { '--listen': ['OLD_LISTEN'], '--log-format': ['TETHER_LOG_FORMAT'] },
  secrets: ['--token'],
  withoutVariables: { once: 'an argument', 'serve --note': 'a note' },
};

const touched = new Set<string>();
function setEnv(values: Record<string, string>) {
  for (const [name, value] of Object.entries(values)) {
    touched.add(name);
    process.env[name] = value;
  }
}
afterEach(() => {
  for (const name of touched) delete process.env[name];
  touched.clear();
});

function program() {
  let out = '';
  let err = '';
  let seen: Record<string, unknown> | null = null;
  const root = new SchemeCommand('demo', SCHEME)
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
    .addOption(new Option('--database <url>', 'mandatory').makeOptionMandatory());
  for (const option of logOptions()) serve.addOption(option);
  serve.action((options: Record<string, unknown>) => {
    seen = options;
  });
  root
    .command('once')
    .exitOverride()
    .option('--label <text>', 'an argument')
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
    expect(rows.find((r) => r.flag.startsWith('--listen'))?.aliases).toEqual(['OLD_LISTEN']);
    const table = flagsTable([program().root]);
    expect(table).toContain('| demo | `--token <secret>` | `TETHER_DEMO_TOKEN` (secret) |');
    expect(table).toContain('| demo | `--note <text>` | — (a note) |');
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
    delete process.env.TETHER_DEMO_LISTEN;
    expect((await program().run('serve')).options).toMatchObject({ listen: 'from-alias' });
    setEnv({ TETHER_LOG_FORMAT: 'json' });
    expect((await program().run('serve')).options).toMatchObject({ logFormat: 'json', logLevel: 'info' });
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
    delete process.env.TETHER_DEMO_PORT;
    setEnv({ TETHER_DEMO_TOKEN: 'short' });
    const fromEnv = await program().run('serve');
    expect(fromEnv.ok).toBe(false);
    expect(fromEnv.err).toContain("option '--token <secret>' is invalid (value not shown). too short");
    expect(fromEnv.err).not.toContain("'short'");
    delete process.env.TETHER_DEMO_TOKEN;
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

  it('finds the version in the package.json of the named package above a module', () => {
    expect(packageVersion(import.meta.url, '@tether/telemetry')).toMatch(/^\d+\.\d+\.\d+/);
    expect(() => packageVersion(import.meta.url, '@tether/nothing-like-it')).toThrow(/cannot find the package.json/);
  });
});
