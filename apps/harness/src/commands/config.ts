import { resolve } from 'node:path';
import { TetherError } from '@tether/client';
import type { Command } from 'commander';
import { type CliIo, printable, report, type SetExit } from '../common.js';
import {
  type Config,
  type Context,
  checkContextName,
  configPath,
  formatConfig,
  loadConfig,
  MAX_CONTEXTS,
  saveConfig,
} from '../config.js';
import { ENV } from '../target.js';

interface SetContextFlags {
  registry?: string;
  environmentId?: string;
  apiKeyFile?: string;
  executorKey?: string;
  url?: string;
  use: boolean;
}

/** `harness config …`: show and change the config file's contexts, as `kubectl config` does. */
export function registerConfig(program: Command, io: CliIo, setExit: SetExit): void {
  const config = program
    .command('config')
    .description('show and change the configuration file: named contexts (registry, environment, API key file)')
    .addHelpText(
      'after',
      `
The file is $${ENV.config}, else $XDG_CONFIG_HOME/tether/config.toml, else ~/.config/tether/config.toml
(TOML, written atomically with mode 0600). A context supplies what a flag or variable does not: each
setting is taken from the flag, else its variable, else the context (--context NAME, ${ENV.context}, or
the file's current-context). The file holds the path of the API key file, never a key. set-context's
--environment is now --environment-id, as everywhere (the old spelling still works, with a warning).

Examples:
  harness config set-context dev --registry https://registry.example.com --environment-id dev-1 \\
      --api-key-file ~/.config/tether/dev.key --use
  harness config get-contexts
  harness config use-context prod
  harness exec --context dev -- uname -a`,
    );
  const action =
    (body: (file: string, ...args: never[]) => number) =>
    (...args: unknown[]) => {
      try {
        setExit(body(configPath(io.env), ...(args as never[])));
      } catch (err) {
        setExit(report(io, err));
      }
    };

  config
    .command('view')
    .description('print the configuration file (paths only: never the contents of a key file)')
    .action(
      action((file) => {
        io.stdout.write(`# ${file}\n${formatConfig(loadConfig(file))}`);
        return 0;
      }),
    );

  config
    .command('get-contexts')
    .description('list the contexts; * marks the current one')
    .option('-o, --output <format>', '"name": the names alone, one a line')
    .action(
      action((file, flags: { output?: string }) => {
        const loaded = loadConfig(file);
        if (flags.output !== undefined && flags.output !== 'name') {
          throw new TetherError('invalid_argument', `--output must be "name", got ${JSON.stringify(flags.output)}`);
        }
        if (flags.output === 'name') {
          for (const name of Object.keys(loaded.contexts)) io.stdout.write(`${name}\n`);
          return 0;
        }
        const rows = [['CURRENT', 'NAME', 'REGISTRY', 'ENVIRONMENT', 'API-KEY-FILE']];
        for (const [name, context] of Object.entries(loaded.contexts)) {
          rows.push([
            name === loaded.currentContext ? '*' : '',
            name,
            context.registry ?? context.url ?? '',
            context.environment ?? '',
            context.apiKeyFile ?? '',
          ]);
        }
        const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => row[column]!.length)));
        for (const row of rows) {
          io.stdout.write(
            `${printable(
              row
                .map((cell, column) => cell.padEnd(widths[column]!))
                .join('  ')
                .trimEnd(),
            )}\n`,
          );
        }
        return 0;
      }),
    );

  config
    .command('current-context')
    .description('print the name of the current context')
    .action(
      action((file) => {
        const current = loadConfig(file).currentContext;
        if (current === undefined) {
          io.stderr.write(`harness: no current context in ${file} (harness config use-context NAME)\n`);
          return 1;
        }
        io.stdout.write(`${printable(current)}\n`);
        return 0;
      }),
    );

  config
    .command('use-context')
    .description('make a context the current one')
    .argument('<name>', 'an existing context')
    .action(
      action((file, name: string) => {
        saveConfig(file, { ...loadWithContext(file, name), currentContext: name });
        io.stdout.write(`Switched to context "${printable(name)}".\n`);
        return 0;
      }),
    );

  config
    .command('set-context')
    .description('create a context, or change the given settings of one')
    .argument('<name>', 'context name (letters, digits, _ . @ : -)')
    .option('--registry <url>', 'registry base URL (http:// or https://)')
    .option('--environment-id <id>', 'environment id')
    .option('--api-key-file <file>', 'file holding the harness API key (stored as an absolute path; chmod 600)')
    .option('--executor-key <file>', 'executor public key to pin (stored as an absolute path)')
    .option('--url <ws-url>', 'an executor WebSocket to talk to directly instead of a registry')
    .option('--use', 'also make it the current context', false)
    .action(
      action((file, name: string, flags: SetContextFlags) => {
        checkContextName(name);
        const loaded = loadConfig(file);
        const existing = loaded.contexts[name];
        if (existing === undefined && Object.keys(loaded.contexts).length >= MAX_CONTEXTS) {
          throw new TetherError('invalid_argument', `${file} already holds ${MAX_CONTEXTS} contexts`);
        }
        const context: Context = { ...existing, ...contextSettings(flags) };
        const next: Config = {
          ...loaded,
          contexts: { ...loaded.contexts, [name]: context },
          ...(flags.use ? { currentContext: name } : {}),
        };
        saveConfig(file, next);
        io.stdout.write(`Context "${printable(name)}" ${existing === undefined ? 'created' : 'modified'}.\n`);
        return 0;
      }),
    );

  config
    .command('delete-context')
    .description('remove a context (and unset current-context when it was the current one)')
    .argument('<name>', 'an existing context')
    .action(
      action((file, name: string) => {
        const loaded = loadWithContext(file, name);
        const { [name]: _removed, ...contexts } = loaded.contexts;
        const next: Config = { contexts };
        if (loaded.currentContext !== undefined && loaded.currentContext !== name) {
          next.currentContext = loaded.currentContext;
        }
        saveConfig(file, next);
        io.stdout.write(`Deleted context "${printable(name)}".\n`);
        return 0;
      }),
    );
}

/** The settings given as flags, checked; file paths made absolute against this directory. */
function contextSettings(flags: SetContextFlags): Context {
  const settings: Context = {};
  if (flags.registry !== undefined) settings.registry = checkedUrl(flags.registry, ['http:', 'https:'], '--registry');
  if (flags.url !== undefined) settings.url = checkedUrl(flags.url, ['ws:', 'wss:'], '--url');
  if (flags.environmentId !== undefined) {
    if (!/^[A-Za-z0-9_-]{1,128}$/.test(flags.environmentId)) {
      throw new TetherError('invalid_argument', `bad --environment-id ${JSON.stringify(flags.environmentId)}`);
    }
    settings.environment = flags.environmentId;
  }
  if (flags.apiKeyFile !== undefined) settings.apiKeyFile = resolve(nonEmpty(flags.apiKeyFile, '--api-key-file'));
  if (flags.executorKey !== undefined) settings.executorKey = resolve(nonEmpty(flags.executorKey, '--executor-key'));
  return settings;
}

function nonEmpty(value: string, flag: string): string {
  if (value === '') throw new TetherError('invalid_argument', `${flag} must not be empty`);
  return value;
}

function checkedUrl(value: string, protocols: string[], flag: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new TetherError('invalid_argument', `${flag} ${JSON.stringify(value)} is not a URL`);
  }
  if (!protocols.includes(url.protocol)) {
    throw new TetherError(
      'invalid_argument',
      `${flag} must be ${protocols.map((p) => `${p}//`).join(' or ')}, got ${url.protocol}//`,
    );
  }
  return value;
}

/** The config in `file`, which must hold a context `name`. */
function loadWithContext(file: string, name: string): Config {
  const loaded = loadConfig(file);
  if (loaded.contexts[name] === undefined) {
    throw new TetherError('invalid_argument', `no context ${JSON.stringify(name)} in ${file}`);
  }
  return loaded;
}
