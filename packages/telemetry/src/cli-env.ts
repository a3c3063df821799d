/**
 * One flag and variable scheme for every Tether CLI: each long flag `--some-flag` of app `relay` is also read
 * from `TETHER_RELAY_SOME_FLAG`, a flag on the command line beats its variable, the scheme's variable beats
 * an older name kept as an alias, and `--version` prints the app's package.json version.
 *
 * The variables are attached as options are added (a Command subclass), because commander registers its
 * environment handling when an option is added: a value-taking option uses commander's own `.env()`
 * (its argument parser and errors, and a mandatory option may come from its variable); a boolean option's
 * variable is read by a preAction hook instead, so that `=0`/`false` mean off (commander treats any value,
 * even `0`, as on), and the same hook applies aliases.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command, InvalidArgumentError, Option } from 'commander';

/** `json` (one object a line), `pretty` (pino-pretty, for people), `auto`: pretty when stderr is a terminal. */
export const LOG_FORMATS = ['auto', 'json', 'pretty'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

/** pino's levels, plus `silent`. */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export interface EnvScheme {
  /** The app's name in the variables: `relay` → `TETHER_RELAY_…`. */
  app: string;
  /** Older variables still read for a long flag (after the scheme's own), e.g. `{'--log-level': ['TETHER_LOG']}`. */
  aliases?: Readonly<Record<string, readonly string[]>>;
  /**
   * Variables the app itself reads for a flag (listed in the README, not applied here) where the app gives
   * them a meaning a flag does not have.
   */
  readByApp?: Readonly<Record<string, readonly string[]>>;
  /** Long flags whose values are secrets: never a default in `--help`, never the value in an error. */
  secrets?: readonly string[];
  /**
   * Flags without a variable, with the reason: a command (path below the program, e.g. `keys create`) for all
   * its flags, or one flag of it (`keys create --role`).
   */
  withoutVariables?: Readonly<Record<string, string>>;
}

/** The variable for a long flag: `--no-forward` of `executor` → `TETHER_EXECUTOR_NO_FORWARD`. */
export function envVarName(app: string, long: string): string {
  return `TETHER_${app}_${long.replace(/^--/, '')}`.toUpperCase().replace(/[^A-Z0-9]+/g, '_');
}

const TRUE = /^(1|true|yes|on)$/i;
const FALSE = /^(0|false|no|off)?$/i;

/** The scheme each command of a program was built with. */
const schemes = new WeakMap<Command, EnvScheme>();

/** The command's path below its program: `keys create` for `registry keys create`. */
export function commandPath(command: Command): string {
  const names: string[] = [];
  for (let c: Command | null = command; c?.parent; c = c.parent) names.unshift(c.name());
  return names.join(' ');
}

/** A commander Command whose options (and subcommands' options) follow the scheme. */
export class SchemeCommand extends Command {
  readonly scheme: EnvScheme;

  constructor(name: string | undefined, scheme: EnvScheme) {
    super(name);
    this.scheme = scheme;
    schemes.set(this, scheme);
    if (!this.parent) this.hook('preAction', (_root, action) => applyHookedVariables(action, scheme));
  }

  override createCommand(name?: string): Command {
    return new SchemeCommand(name, this.scheme);
  }

  override addOption(option: Option): this {
    const name = option.long && option.long !== '--version' ? variableFor(this, option) : null;
    const secret = option.long !== undefined && (this.scheme.secrets ?? []).includes(option.long);
    if (secret) {
      if (option.defaultValue !== undefined) throw new Error(`secret flag ${option.long} must not have a default`);
      hideValueInErrors(this, option);
    }
    if (name === null) return super.addOption(option);
    if (option.envVar !== undefined && option.envVar !== name) {
      throw new Error(`${option.long} is read from ${name} (the scheme's name), not ${option.envVar}`);
    }
    if (option.required || option.optional) {
      option.env(name);
      return super.addOption(option);
    }
    // A boolean: shown in --help, applied by the preAction hook (commander registers no handler now).
    super.addOption(option);
    option.envVar = name;
    return this;
  }
}

/** The variable for an option of this command, or null where the command has none. */
function variableFor(command: SchemeCommand, option: Option): string | null {
  if (withoutVariable(command.scheme, command, option) !== undefined) return null;
  return envVarName(command.scheme.app, option.long as string);
}

/** Why this option of this command has no variable, or undefined when it has one. */
function withoutVariable(scheme: EnvScheme, command: Command, option: Option): string | undefined {
  const path = commandPath(command);
  const without = scheme.withoutVariables ?? {};
  for (const key of [`${path} ${option.long}`.trim(), path]) if (Object.hasOwn(without, key)) return without[key];
  return undefined;
}

/** Replaces the option's parser by one whose errors leave the value out (commander's would print it). */
function hideValueInErrors(command: Command, option: Option): void {
  const parse = option.parseArg;
  if (!parse) return;
  option.parseArg = <T>(value: string, previous: T): T => {
    try {
      return parse(value, previous) as T;
    } catch (err) {
      if (!(err instanceof InvalidArgumentError)) throw err;
      // Not commander's own code: commander would catch that and report again, with the value.
      command.error(`error: option '${option.flags}' is invalid (value not shown). ${err.message}`, {
        code: 'tether.invalidSecret',
        exitCode: err.exitCode,
      });
    }
  };
}

/** Whether a value came from somewhere more specific than a default. */
function isSet(command: Command, key: string): boolean {
  const source = command.getOptionValueSource(key);
  return source !== undefined && source !== 'default' && source !== 'implied';
}

/** Booleans' variables and aliases, for the command that runs and the commands above it. */
function applyHookedVariables(action: Command, scheme: EnvScheme, env: NodeJS.ProcessEnv = process.env): void {
  for (let command: Command | null = action; command; command = command.parent) {
    for (const option of command.options) {
      if (!option.long || option.envVar === undefined) continue;
      const key = option.attributeName();
      const boolean = !(option.required || option.optional);
      const names = [...(boolean ? [option.envVar] : []), ...(scheme.aliases?.[option.long] ?? [])];
      if (isSet(command, key)) continue;
      for (const name of names) {
        const raw = env[name];
        if (raw === undefined) continue;
        if (name !== option.envVar && raw === '') continue; // an empty alias counts as unset
        const shown = (scheme.secrets ?? []).includes(option.long) ? '(value not shown)' : `'${raw}'`;
        const invalid = `error: option '${option.flags}' value ${shown} from env '${name}' is invalid.`;
        if (boolean) {
          if (!TRUE.test(raw) && !FALSE.test(raw)) command.error(`${invalid} Expected 1/true/yes or 0/false/no.`);
          if (TRUE.test(raw)) command.setOptionValueWithSource(key, !option.negate, 'env');
        } else {
          let value: unknown = raw;
          try {
            if (option.parseArg) value = option.parseArg(raw, command.getOptionValue(key));
          } catch (err) {
            if (!(err instanceof InvalidArgumentError)) throw err;
            command.error(`${invalid} ${err.message}`, { code: 'commander.invalidArgument' });
          }
          if (option.argChoices && !option.argChoices.includes(raw)) {
            command.error(`${invalid} Allowed choices are ${option.argChoices.join(', ')}.`);
          }
          command.setOptionValueWithSource(key, value, 'env');
        }
        break;
      }
    }
  }
}

/**
 * The version in the package.json of package `name`, found by walking up from `from` (a module's
 * import.meta.url): works from src/, dist/, a bundle's chunk directory and an installed package alike.
 */
export function packageVersion(from: string, name: string): string {
  let dir = dirname(fileURLToPath(from));
  for (;;) {
    try {
      const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
        name?: string;
        version?: string;
      };
      if (manifest.name === name && typeof manifest.version === 'string') return manifest.version;
    } catch {
      // no package.json here (or an unreadable one): keep walking up
    }
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`cannot find the package.json of ${name} above ${from}`);
    dir = parent;
  }
}

/**
 * `--log-level` and `--log-format` for a service command. `level` is the default level, or undefined where
 * the app has a later source (the executor's config file).
 */
export function logOptions(level: LogLevel | undefined = 'info'): Option[] {
  const levelOption = new Option('--log-level <level>', 'log level').choices(LOG_LEVELS);
  if (level !== undefined) levelOption.default(level);
  return [
    levelOption,
    new Option('--log-format <format>', 'log lines: auto (pretty on a terminal, else JSON), json or pretty')
      .choices(LOG_FORMATS)
      .default('auto'),
  ];
}

/** The variable every app also reads for `--log-format`. */
export const LOG_FORMAT_ALIAS = 'TETHER_LOG_FORMAT';

/** One row of the flags table: a long flag of an app, its variable (or none), and where it appears. */
export interface FlagRow {
  app: string;
  flag: string;
  variable: string | null;
  aliases: readonly string[];
  commands: string[];
  secret: boolean;
  /** Why the flag has no variable (its command's `withoutVariables` reason). */
  without?: string;
}

/** Every long flag of a program built on SchemeCommand, merged across commands, in order of appearance. */
export function flagRows(program: Command): FlagRow[] {
  const scheme = schemes.get(program);
  if (!scheme) throw new Error(`${program.name()} was not built with SchemeCommand`);
  const rows = new Map<string, FlagRow>();
  const visit = (command: Command) => {
    const path = commandPath(command) || '(program)';
    for (const option of command.options) {
      if (!option.long) continue;
      const without = withoutVariable(scheme, command, option);
      const variable = option.long === '--version' ? null : without === undefined ? (option.envVar ?? null) : null;
      const id = `${option.long} ${variable ?? ''}`;
      const row = rows.get(id) ?? {
        app: scheme.app,
        flag: option.flags,
        variable,
        aliases:
          variable === null
            ? []
            : [...(scheme.aliases?.[option.long] ?? []), ...(scheme.readByApp?.[option.long] ?? [])],
        commands: [],
        secret: (scheme.secrets ?? []).includes(option.long),
        ...(without === undefined ? {} : { without }),
      };
      row.commands.push(path);
      rows.set(id, row);
    }
    for (const sub of command.commands) visit(sub);
  };
  visit(program);
  return [...rows.values()];
}

/** The README's flags table (markdown) for these programs. */
export function flagsTable(programs: readonly Command[]): string {
  const lines = ['| app | flag | variable | also read | commands |', '|---|---|---|---|---|'];
  for (const program of programs) {
    for (const row of flagRows(program)) {
      const variable = row.variable
        ? `\`${row.variable}\`${row.secret ? ' (secret)' : ''}`
        : row.flag.includes('--version')
          ? '—'
          : `— (${row.without})`;
      const aliases = row.aliases.map((a) => `\`${a}\``).join(', ');
      const commands = row.commands.length > 4 ? `${row.commands.length} commands` : row.commands.join(', ');
      lines.push(`| ${row.app} | \`${row.flag.replace(/\|/g, '\\|')}\` | ${variable} | ${aliases} | ${commands} |`);
    }
  }
  return `${lines.join('\n')}\n`;
}
