/**
 * One flag and variable scheme for every Tether CLI: each long flag `--some-flag` of app `relay` is also read
 * from `TETHER_RELAY_SOME_FLAG`, a flag on the command line beats its variable, the scheme's variable beats
 * an older name still read (with a deprecation line on stderr, once a run), and `--version` prints the app's
 * package.json version. A flag of a subcommand may come before the subcommand's name as well as after it
 * (`harness --registry URL exec …` is `harness exec --registry URL …`), as kubectl takes its flags.
 *
 * The scheme is applied by a Command subclass: variables are read from the app's environment once a
 * command's own options are parsed (before commander checks mandatory options, so a mandatory option may come
 * from its variable); a boolean's variable is `1`/`true`/`yes` or `0`/`false`/`no` (commander would treat any
 * value, even `0`, as on); an empty variable counts as unset. Renamed flags keep their old spelling (hidden
 * from --help) with a deprecation line.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command, Help, InvalidArgumentError, Option, type ParseOptionsResult } from 'commander';

export {
  type BareUnit,
  type DurationBounds,
  durationArg,
  durationHint,
  formatDuration,
  type ListenAddress,
  parseDuration,
  parseListenAddress,
} from './cli-values.js';

/** `json` (one object a line), `pretty` (pino-pretty, for people), `auto`: pretty when stderr is a terminal. */
export const LOG_FORMATS = ['auto', 'json', 'pretty'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

/** pino's levels, plus `silent`. */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** A variable an app reads without a flag for it (a key given by value), for the flags table. */
export interface SchemeVariable {
  name: string;
  /** What it holds (the table's flag column). */
  what: string;
  /** The commands that read it (paths below the program; `(program)` for the program itself). */
  commands: readonly string[];
  secret?: boolean;
  /** Other names read without a deprecation line (Codex's). */
  also?: readonly string[];
  /** Older names still read, with a deprecation line. */
  deprecated?: readonly string[];
}

export interface EnvScheme {
  /** The app's name in the variables: `relay` → `TETHER_RELAY_…`. */
  app: string;
  /**
   * Older variables still read for a long flag (after the scheme's own), each with a deprecation line naming
   * the scheme's variable: `{'--log-level': ['TETHER_LOG']}`.
   */
  deprecatedVariables?: Readonly<Record<string, readonly string[]>>;
  /**
   * Renamed flags, old → new long flag: `{'--heartbeat-interval-ms': '--heartbeat-interval'}`, or for one
   * command only `{'config set-context --environment': '--environment-id'}`. The old spelling is still
   * accepted (hidden from --help; its value is parsed as the new flag's) with a deprecation line, and so is
   * the old flag's variable where the command has variables.
   */
  renamedFlags?: Readonly<Record<string, string>>;
  /**
   * Other spellings of a flag accepted without a deprecation line (another program's, e.g. Codex's):
   * `{'--remote': '--registry'}`. Hidden from --help (the flag's own help should name them).
   */
  flagAliases?: Readonly<Record<string, string>>;
  /**
   * For the flags table: variables the app reads itself for a flag, beside the scheme's, that are not
   * deprecated (another program's names, e.g. `CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE`).
   */
  alsoReadByApp?: Readonly<Record<string, readonly string[]>>;
  /**
   * For the flags table: deprecated variables the app reads itself for a flag (where reading them as the
   * flag's would change what they mean), saying its own deprecation line.
   */
  deprecatedReadByApp?: Readonly<Record<string, readonly string[]>>;
  /** For the flags table: variables without a flag. */
  variables?: readonly SchemeVariable[];
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
const FALSE = /^(0|false|no|off)$/i;

/**
 * Deprecation lines: one per old name and run, on stderr, naming the new name (never a value). `hold()`
 * keeps them until `flush()` (the executor says them once it no longer re-executes itself).
 */
export class Deprecations {
  private readonly said = new Set<string>();
  private held: string[] | null = null;

  constructor(
    readonly app: string,
    private readonly write: (text: string) => void,
  ) {}

  /** `<app>: warning: <old> is deprecated; use <replacement>` once a run; `note` is added in parentheses. */
  warn(old: string, replacement: string, note?: string): void {
    this.say(old, replacement, note, false);
  }

  /** As warn(), but said at once even while lines are held. */
  warnNow(old: string, replacement: string, note?: string): void {
    this.say(old, replacement, note, true);
  }

  private say(old: string, replacement: string, note: string | undefined, now: boolean): void {
    if (this.said.has(old)) return;
    this.said.add(old);
    const line = `${this.app}: warning: ${old} is deprecated; use ${replacement}${note ? ` (${note})` : ''}\n`;
    if (this.held && !now) this.held.push(line);
    else this.write(line);
  }

  /** Keeps the lines from now on until flush(). */
  hold(): void {
    this.held ??= [];
  }

  /** Says the lines kept, and the following ones at once. */
  flush(): void {
    const lines = this.held ?? [];
    this.held = null;
    for (const line of lines) this.write(line);
  }

  /** The old names warned about so far. */
  get names(): string[] {
    return [...this.said];
  }
}

/** The scheme each command of a program was built with. */
const schemes = new WeakMap<Command, EnvScheme>();

/** Hidden options standing for another spelling of a flag: the option they set, and whether deprecated. */
const aliases = new WeakMap<Option, { target: Option; deprecated: boolean }>();

/** The command's path below its program: `keys create` for `registry keys create`. */
export function commandPath(command: Command): string {
  const names: string[] = [];
  for (let c: Command | null = command; c?.parent; c = c.parent) names.unshift(c.name());
  return names.join(' ');
}

export interface SchemeContext {
  /** Where the variables are read (the app's environment); default process.env. */
  env?: NodeJS.ProcessEnv;
  /** Shared by a program's commands; default a new one writing to the program's error output. */
  deprecations?: Deprecations;
}

/** A commander Command whose options (and subcommands' options) follow the scheme. */
export class SchemeCommand extends Command {
  readonly scheme: EnvScheme;
  readonly env: NodeJS.ProcessEnv;
  readonly deprecations: Deprecations;

  constructor(name: string | undefined, scheme: EnvScheme, context: SchemeContext = {}) {
    super(name);
    this.scheme = scheme;
    this.env = context.env ?? process.env;
    this.deprecations = context.deprecations ?? new Deprecations(scheme.app, (text) => this.writeErr(text));
    schemes.set(this, scheme);
  }

  override createCommand(name?: string): Command {
    return new SchemeCommand(name, this.scheme, { env: this.env, deprecations: this.deprecations });
  }

  override createHelp(): Help {
    return Object.assign(new SchemeHelp(), this.configureHelp());
  }

  override addOption(option: Option): this {
    const name = option.long && option.long !== '--version' ? variableFor(this, option) : null;
    const secret = option.long !== undefined && (this.scheme.secrets ?? []).includes(option.long);
    if (secret) {
      if (option.defaultValue !== undefined) throw new Error(`secret flag ${option.long} must not have a default`);
      hideValueInErrors(this, option);
    }
    if (option.envVar !== undefined && option.envVar !== name) {
      throw new Error(`${option.long} is read from ${name} (the scheme's name), not ${option.envVar}`);
    }
    // Set after commander has registered the option, so that it registers no variable handling of its own:
    // the variable is shown in --help and read by parseOptions.
    option.envVar = undefined;
    super.addOption(option);
    if (name !== null) option.envVar = name;
    for (const [old, deprecated] of otherSpellings(this, option)) {
      const alias = new Option(`${old}${option.required ? ' <value>' : option.optional ? ' [value]' : ''}`).hideHelp();
      if (option.argChoices) alias.choices(option.argChoices);
      else if (option.parseArg) alias.argParser(option.parseArg);
      if (secret) hideValueInErrors(this, alias);
      aliases.set(alias, { target: option, deprecated });
      super.addOption(alias);
    }
    return this;
  }

  override parseOptions(argv: string[]): ParseOptionsResult {
    const result = super.parseOptions(this.commands.length > 0 ? hoistOptions(this, argv) : argv);
    this.applyOtherSpellings();
    this.applyVariables();
    return result;
  }

  /** Writes to the program's error output (io.stderr where the app configured it). */
  private writeErr(text: string): void {
    let root: Command = this;
    while (root.parent) root = root.parent;
    const write = root.configureOutput().writeErr;
    if (write) write(text);
    else process.stderr.write(text);
  }

  /** An old or other spelling given on the command line sets the flag it stands for (unless that is given too). */
  private applyOtherSpellings(): void {
    for (const option of this.options) {
      const alias = aliases.get(option);
      const key = option.attributeName();
      if (!alias || this.getOptionValueSource(key) !== 'cli') continue;
      const targetKey = alias.target.attributeName();
      if (this.getOptionValueSource(targetKey) !== 'cli') {
        this.setOptionValueWithSource(targetKey, this.getOptionValue(key), 'cli');
      }
      this.setOptionValueWithSource(key, undefined, 'default');
      if (alias.deprecated) this.deprecations.warn(option.long as string, alias.target.long as string);
    }
  }

  /** Each option not given on the command line from its variable, else from an older name (with a line). */
  private applyVariables(): void {
    for (const option of this.options) {
      if (!option.long || option.envVar === undefined || aliases.has(option)) continue;
      const key = option.attributeName();
      if (isSet(this, key)) continue;
      const secret = (this.scheme.secrets ?? []).includes(option.long);
      for (const name of [option.envVar, ...deprecatedVariables(this, option)]) {
        const raw = this.env[name];
        if (raw === undefined || raw === '') continue;
        const shown = secret ? '(value not shown)' : `'${raw}'`;
        const invalid = `error: option '${option.flags}' value ${shown} from env '${name}' is invalid.`;
        if (option.required || option.optional) {
          let value: unknown = raw;
          try {
            if (option.parseArg) value = option.parseArg(raw, this.getOptionValue(key));
          } catch (err) {
            if (!(err instanceof InvalidArgumentError)) throw err;
            this.error(`${invalid} ${err.message}`, { code: 'commander.invalidArgument' });
          }
          this.setOptionValueWithSource(key, value, 'env');
        } else {
          if (!TRUE.test(raw) && !FALSE.test(raw)) this.error(`${invalid} Expected 1/true/yes or 0/false/no.`);
          if (TRUE.test(raw)) this.setOptionValueWithSource(key, !option.negate, 'env');
        }
        if (name !== option.envVar) this.deprecations.warn(name, option.envVar);
        break;
      }
    }
  }
}

/**
 * Help that names each default once: no `default: false` for a boolean, none for an empty list, and a
 * description's own trailing `(default …)` joins commander's parentheses instead of standing beside them.
 */
class SchemeHelp extends Help {
  override optionDescription(option: Option): string {
    let description = option.description;
    const extra: string[] = [];
    if (option.argChoices) extra.push(`choices: ${option.argChoices.join(', ')}`);
    const own = /\s*\(default:? ([^()]*(?:\([^()]*\)[^()]*)*)\)$/.exec(description);
    if (own) description = description.slice(0, own.index);
    const value = option.defaultValue;
    const empty = Array.isArray(value) ? value.length === 0 : isPlainObject(value) && Object.keys(value).length === 0;
    if (option.defaultValueDescription) extra.push(`default: ${option.defaultValueDescription}`);
    else if (own) extra.push(`default: ${own[1]}`);
    else if (value !== undefined && value !== false && !empty && (option.required || option.optional)) {
      extra.push(`default: ${typeof value === 'string' ? value : JSON.stringify(value)}`);
    }
    if (option.envVar !== undefined) extra.push(`env: ${option.envVar}`);
    return extra.length > 0 ? `${description} (${extra.join(', ')})`.trim() : description;
  }
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && Object.getPrototypeOf(value) === Object.prototype;
}

/** The other spellings of this option of this command: [old flag, deprecated]. */
function otherSpellings(command: SchemeCommand, option: Option): Array<[string, boolean]> {
  const found: Array<[string, boolean]> = [];
  if (!option.long) return found;
  const path = commandPath(command);
  for (const [table, deprecated] of [
    [command.scheme.renamedFlags, true],
    [command.scheme.flagAliases, false],
  ] as const) {
    for (const [key, target] of Object.entries(table ?? {})) {
      const words = key.split(' ');
      const old = words.pop() as string;
      if (target === option.long && (words.length === 0 || words.join(' ') === path)) found.push([old, deprecated]);
    }
  }
  return found;
}

/** The deprecated variables of an option that has one: the scheme's older names and renamed flags' variables. */
function deprecatedVariables(command: SchemeCommand, option: Option): string[] {
  const long = option.long as string;
  const renamed = otherSpellings(command, option)
    .filter(([, deprecated]) => deprecated)
    .map(([old]) => envVarName(command.scheme.app, old));
  return [...(command.scheme.deprecatedVariables?.[long] ?? []), ...renamed];
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

/** How an option is spelled on a command line: with a value, or alone; null for an optional value. */
function arity(option: Option): 'value' | 'boolean' | null {
  return option.required ? 'value' : option.optional ? null : 'boolean';
}

/**
 * `argv` with the options given before the subcommand's name that belong to a command below this one moved
 * after that name (`--registry URL exec …` → `exec --registry URL …`). Unchanged when anything before the
 * name is not clearly such an option (unknown below, or taking a value in one command and none in another):
 * commander then reports it as it would have.
 */
function hoistOptions(command: Command, argv: string[]): string[] {
  const own: string[] = [];
  const moved: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === '--') return argv;
    if (arg.length < 2 || !arg.startsWith('-')) {
      const sub = command.commands.find((c) => c.name() === arg || c.aliases().includes(arg));
      return moved.length > 0 && sub ? [...own, arg, ...moved, ...argv.slice(i + 1)] : argv;
    }
    const inline = arg.startsWith('--') && arg.includes('=');
    const flag = inline ? arg.slice(0, arg.indexOf('=')) : arg;
    const mine = command.options.find((o) => o.short === flag || o.long === flag);
    const help = flag === '-h' || flag === '--help';
    const kind = mine ? arity(mine) : help ? 'boolean' : arityBelow(command, flag);
    if (kind === null) return argv;
    const bucket = mine || help ? own : moved;
    bucket.push(arg);
    if (kind === 'value' && !inline) {
      if (i + 1 >= argv.length) return argv;
      bucket.push(argv[++i] as string);
    }
  }
  return argv;
}

/** How `flag` is spelled in the commands below `command`, or null when unknown there or spelled both ways. */
function arityBelow(command: Command, flag: string): 'value' | 'boolean' | null {
  const kinds = new Set<'value' | 'boolean' | null>();
  const visit = (c: Command) => {
    for (const o of c.options) if (o.short === flag || o.long === flag) kinds.add(arity(o));
    for (const sub of c.commands) visit(sub);
  };
  for (const sub of command.commands) visit(sub);
  return kinds.size === 1 ? ([...kinds][0] ?? null) : null;
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

/** The variable every app read for `--log-format` beside its own: deprecated (one variable per flag). */
export const LOG_FORMAT_ALIAS = 'TETHER_LOG_FORMAT';

/** One row of the flags table: a long flag of an app (or a variable without one), and where it appears. */
export interface FlagRow {
  app: string;
  /** The flag as commander spells it; empty for a variable without a flag. */
  flag: string;
  /** For a variable without a flag: what it holds. */
  what?: string;
  variable: string | null;
  /** Other spellings accepted without a deprecation line (another program's): flags and variables. */
  also: readonly string[];
  /** Older spellings still accepted, with a deprecation line: flags and variables. */
  deprecated: readonly string[];
  commands: string[];
  secret: boolean;
  /** Why the flag has no variable (its command's `withoutVariables` reason). */
  without?: string;
}

/** Every long flag of a program built on SchemeCommand, merged across commands, in order of appearance. */
export function flagRows(program: Command): FlagRow[] {
  const scheme = schemes.get(program);
  if (!scheme || !(program instanceof SchemeCommand)) {
    throw new Error(`${program.name()} was not built with SchemeCommand`);
  }
  const rows = new Map<string, FlagRow>();
  const visit = (command: SchemeCommand) => {
    const path = commandPath(command) || '(program)';
    for (const option of command.options) {
      if (!option.long || aliases.has(option)) continue;
      const without = withoutVariable(scheme, command, option);
      const variable = option.long === '--version' ? null : without === undefined ? (option.envVar ?? null) : null;
      const id = `${option.long} ${variable ?? ''}`;
      const spellings = otherSpellings(command, option);
      const row = rows.get(id) ?? {
        app: scheme.app,
        flag: option.flags,
        variable,
        also: [
          ...spellings.filter(([, deprecated]) => !deprecated).map(([flag]) => flag),
          ...(variable === null ? [] : (scheme.alsoReadByApp?.[option.long] ?? [])),
        ],
        deprecated: [
          ...spellings.filter(([, deprecated]) => deprecated).map(([flag]) => flag),
          ...(variable === null
            ? []
            : [...deprecatedVariables(command, option), ...(scheme.deprecatedReadByApp?.[option.long] ?? [])]),
        ],
        commands: [],
        secret: (scheme.secrets ?? []).includes(option.long),
        ...(without === undefined ? {} : { without }),
      };
      row.commands.push(path);
      rows.set(id, row);
    }
    for (const sub of command.commands) visit(sub as SchemeCommand);
  };
  visit(program);
  for (const variable of scheme.variables ?? []) {
    rows.set(variable.name, {
      app: scheme.app,
      flag: '',
      what: variable.what,
      variable: variable.name,
      also: variable.also ?? [],
      deprecated: variable.deprecated ?? [],
      commands: [...variable.commands],
      secret: variable.secret === true,
    });
  }
  return [...rows.values()];
}

/** The README's flags table (markdown) for these programs. */
export function flagsTable(programs: readonly Command[]): string {
  const lines = [
    '| app | flag | variable | also accepted | deprecated (still read, with a warning) | commands |',
    '|---|---|---|---|---|---|',
  ];
  const names = (list: readonly string[]) => list.map((name) => `\`${name}\``).join(', ');
  for (const program of programs) {
    for (const row of flagRows(program)) {
      const variable = row.variable
        ? `\`${row.variable}\`${row.secret ? ' (secret)' : ''}`
        : row.flag.includes('--version')
          ? '—'
          : `— (${row.without})`;
      const flag = row.flag === '' ? `— (${row.what})` : `\`${row.flag.replace(/\|/g, '\\|')}\``;
      const commands = row.commands.length > 4 ? `${row.commands.length} commands` : row.commands.join(', ');
      lines.push(
        `| ${row.app} | ${flag} | ${variable} | ${names(row.also)} | ${names(row.deprecated)} | ${commands} |`,
      );
    }
  }
  return `${lines.join('\n')}\n`;
}
