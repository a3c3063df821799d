import type { Command, Option } from 'commander';
import type { CliIo, SetExit } from '../common.js';

const SHELLS = ['bash', 'zsh', 'fish'] as const;
type Shell = (typeof SHELLS)[number];

/**
 * `harness completion bash|zsh|fish`: a completion script made from the program's own commands and
 * options, so it never falls behind them. Context names (--context, use-context, …) are asked of
 * `harness config get-contexts -o name` when completing.
 */
export function registerCompletion(program: Command, io: CliIo, setExit: SetExit): void {
  program
    .command('completion')
    .description('print a shell completion script (bash, zsh or fish)')
    .argument('<shell>', SHELLS.join(' | '))
    .addHelpText(
      'after',
      `
Install:
  bash:  echo 'source <(harness completion bash)' >> ~/.bashrc
  zsh:   harness completion zsh > "\${fpath[1]}/_harness"     (or: source <(harness completion zsh))
  fish:  harness completion fish > ~/.config/fish/completions/harness.fish`,
    )
    .action((shell: string) => {
      if (!(SHELLS as readonly string[]).includes(shell)) {
        io.stderr.write(`harness: no completion for ${JSON.stringify(shell)}: choose ${SHELLS.join(', ')}\n`);
        setExit(2);
        return;
      }
      io.stdout.write(completionScript(program, shell as Shell));
      setExit(0);
    });
}

interface OptionSpec {
  short?: string;
  long?: string;
  description: string;
  /** The option takes a value; `kind` says what completes it. */
  value: 'none' | 'file' | 'directory' | 'context' | 'other';
}

interface CommandSpec {
  name: string;
  description: string;
  options: OptionSpec[];
  subcommands: CommandSpec[];
  /** Its first argument is a context name. */
  takesContext: boolean;
}

const CONTEXT_COMMANDS = new Set(['use-context', 'delete-context', 'set-context']);

function describe(command: Command): CommandSpec {
  const name = command.name();
  return {
    name,
    description: oneLine(command.description()),
    options: [
      ...(command.options as readonly Option[]).filter((option) => !option.hidden).map(describeOption),
      { short: '-h', long: '--help', description: 'show help', value: 'none' },
    ],
    subcommands: command.commands.filter((sub) => !isHidden(sub)).map(describe),
    takesContext: CONTEXT_COMMANDS.has(name),
  };
}

function isHidden(command: Command): boolean {
  return (command as unknown as { _hidden?: boolean })._hidden === true || command.name() === 'help';
}

function describeOption(option: Option): OptionSpec {
  const takesValue = option.required || option.optional;
  const long = option.long ?? undefined;
  let value: OptionSpec['value'] = 'none';
  if (takesValue) {
    if (long === '--context') value = 'context';
    else if (long === '--cwd') value = 'directory';
    else if (/<(file|dir|path)>/.test(option.flags)) value = 'file';
    else value = 'other';
  }
  return {
    ...(option.short ? { short: option.short } : {}),
    ...(long ? { long } : {}),
    description: oneLine(option.description),
    value,
  };
}

function oneLine(text: string): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > 90 ? `${line.slice(0, 87)}...` : line;
}

export function completionScript(program: Command, shell: Shell): string {
  const root = describe(program);
  if (shell === 'bash') return bashScript(root);
  if (shell === 'zsh') return zshScript(root);
  return fishScript(root);
}

const CONTEXTS_COMMAND = 'harness config get-contexts -o name 2>/dev/null';

const flagsOf = (options: OptionSpec[]) =>
  options.flatMap((option) => [option.short, option.long].filter((flag): flag is string => flag !== undefined));

/** Names as shell words: only [A-Za-z0-9_-] reach a script unquoted (commander names are such). */
function word(name: string): string {
  if (!/^[A-Za-z0-9_-]+$/.test(name)) throw new Error(`unexpected command or option name ${JSON.stringify(name)}`);
  return name;
}

function bashScript(root: CommandSpec): string {
  const valueOptions = (options: OptionSpec[], kind: OptionSpec['value']) =>
    options.filter((option) => option.value === kind).flatMap((option) => flagsOf([option]));
  const cases = root.subcommands.map((command) => {
    const subcommands = command.subcommands.map((sub) => word(sub.name)).join(' ');
    const subCases = command.subcommands
      .map((sub) => {
        const context = sub.takesContext
          ? `        if [ "$COMP_CWORD" -eq 3 ] && [[ "$cur" != -* ]]; then COMPREPLY=($(compgen -W "$(${CONTEXTS_COMMAND})" -- "$cur")); return; fi\n`
          : '';
        return `      ${word(sub.name)})\n${context}        opts="${flagsOf(sub.options).join(' ')}" ;;`;
      })
      .join('\n');
    const body =
      command.subcommands.length > 0
        ? `      if [ "$COMP_CWORD" -eq 2 ]; then COMPREPLY=($(compgen -W "${subcommands}" -- "$cur")); return; fi
      case "\${COMP_WORDS[2]}" in
${subCases}
      esac`
        : `      opts="${flagsOf(command.options).join(' ')}"`;
    return `    ${word(command.name)})\n${body} ;;`;
  });
  const all = root.subcommands.flatMap((command) => [command, ...command.subcommands]);
  const allOptions = all.flatMap((command) => command.options);
  const unique = (list: string[]) => [...new Set(list)].join('|');
  const fileOptions = unique(valueOptions(allOptions, 'file'));
  const directoryOptions = unique(valueOptions(allOptions, 'directory'));
  const otherOptions = unique(valueOptions(allOptions, 'other'));
  return `# bash completion for harness (harness completion bash); load with: source <(harness completion bash)
_harness() {
  local cur prev opts
  cur="\${COMP_WORDS[COMP_CWORD]}"
  prev="\${COMP_WORDS[COMP_CWORD-1]}"
  COMPREPLY=()
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W "${root.subcommands.map((command) => word(command.name)).join(' ')} ${flagsOf(root.options).join(' ')}" -- "$cur"))
    return
  fi
  case "$prev" in
    --context) COMPREPLY=($(compgen -W "$(${CONTEXTS_COMMAND})" -- "$cur")); return ;;${directoryOptions ? `\n    ${directoryOptions}) COMPREPLY=($(compgen -d -- "$cur")); return ;;` : ''}${fileOptions ? `\n    ${fileOptions}) COMPREPLY=($(compgen -f -- "$cur")); return ;;` : ''}${otherOptions ? `\n    ${otherOptions}) return ;;` : ''}
  esac
  opts=""
  case "\${COMP_WORDS[1]}" in
${cases.join('\n')}
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}
complete -o filenames -F _harness harness
`;
}

/** Text inside a zsh single-quoted _arguments spec: quotes, brackets and colons escaped. */
function zshText(text: string): string {
  return text.replace(/([[\]:\\])/g, '\\$1').replace(/'/g, `'\\''`);
}

function zshOptionSpecs(options: OptionSpec[]): string[] {
  return options.map((option) => {
    const flags = flagsOf([option]);
    const action =
      option.value === 'none'
        ? ''
        : option.value === 'context'
          ? ':context:_harness_contexts'
          : option.value === 'directory'
            ? ':directory:_files -/'
            : option.value === 'file'
              ? ':file:_files'
              : ':value: ';
    const spec = `[${zshText(option.description)}]${action}'`;
    // Two spellings: brace expansion makes one spec of each, exclusive of the other.
    return flags.length > 1 ? `'(${flags.join(' ')})'{${flags.join(',')}}'${spec}` : `'${flags[0]}${spec}`;
  });
}

function zshScript(root: CommandSpec): string {
  const describeList = (commands: CommandSpec[]) =>
    commands.map((command) => `'${word(command.name)}:${zshText(command.description)}'`).join(' ');
  const cases = root.subcommands.map((command) => {
    if (command.subcommands.length === 0) {
      return `    ${word(command.name)})\n      _arguments -s ${zshOptionSpecs(command.options).join(' ')} '*:file:_files' ;;`;
    }
    const subCases = command.subcommands
      .map(
        (sub) =>
          `        ${word(sub.name)}) _arguments -s ${zshOptionSpecs(sub.options).join(' ')} ${sub.takesContext ? `'1:context:_harness_contexts'` : ''} ;;`,
      )
      .join('\n');
    return `    ${word(command.name)})
      if (( CURRENT == 2 )); then
        local -a subcommands; subcommands=(${describeList(command.subcommands)})
        _describe -t commands 'harness ${word(command.name)} command' subcommands; return
      fi
      local sub=$words[2]; shift words; (( CURRENT-- ))
      case $sub in
${subCases}
      esac ;;`;
  });
  return `#compdef harness
# zsh completion for harness (harness completion zsh): put it in a directory of $fpath as _harness, or
# source <(harness completion zsh)
_harness_contexts() {
  local -a contexts; contexts=(\${(f)"$(${CONTEXTS_COMMAND})"})
  _describe -t contexts 'context' contexts
}
_harness() {
  if (( CURRENT == 2 )); then
    local -a commands; commands=(${describeList(root.subcommands)})
    _describe -t commands 'harness command' commands; return
  fi
  local cmd=$words[2]; shift words; (( CURRENT-- ))
  case $cmd in
${cases.join('\n')}
  esac
}
if [ "$funcstack[1]" = "_harness" ]; then _harness "$@"; else compdef _harness harness; fi
`;
}

/** Text inside a fish single-quoted word. */
function fishText(text: string): string {
  return text.replace(/\\/g, '\\\\').replace(/'/g, "\\'");
}

function fishOption(condition: string, option: OptionSpec): string {
  const parts = [`complete -c harness -n '${condition}'`];
  if (option.short) parts.push(`-s ${word(option.short.slice(1))}`);
  if (option.long) parts.push(`-l ${word(option.long.slice(2))}`);
  if (option.value === 'context') parts.push(`-x -a '(${CONTEXTS_COMMAND})'`);
  else if (option.value === 'directory') parts.push(`-x -a '(__fish_complete_directories)'`);
  else if (option.value !== 'none') parts.push('-r');
  parts.push(`-d '${fishText(option.description)}'`);
  return parts.join(' ');
}

function fishScript(root: CommandSpec): string {
  const lines = [
    '# fish completion for harness (harness completion fish > ~/.config/fish/completions/harness.fish)',
    'complete -c harness -f',
  ];
  for (const option of root.options) lines.push(fishOption('__fish_use_subcommand', option));
  for (const command of root.subcommands) {
    const name = word(command.name);
    lines.push(`complete -c harness -n '__fish_use_subcommand' -a ${name} -d '${fishText(command.description)}'`);
    const inCommand = `__fish_seen_subcommand_from ${name}`;
    if (command.subcommands.length === 0) {
      for (const option of command.options) lines.push(fishOption(inCommand, option));
      lines.push(`complete -c harness -n '${inCommand}' -F`);
      continue;
    }
    const subNames = command.subcommands.map((sub) => word(sub.name)).join(' ');
    for (const sub of command.subcommands) {
      lines.push(
        `complete -c harness -n '${inCommand}; and not __fish_seen_subcommand_from ${subNames}' -a ${word(sub.name)} -d '${fishText(sub.description)}'`,
      );
      const inSub = `${inCommand}; and __fish_seen_subcommand_from ${word(sub.name)}`;
      for (const option of sub.options) lines.push(fishOption(inSub, option));
      if (sub.takesContext) lines.push(`complete -c harness -n '${inSub}' -x -a '(${CONTEXTS_COMMAND})'`);
    }
  }
  return `${lines.join('\n')}\n`;
}
