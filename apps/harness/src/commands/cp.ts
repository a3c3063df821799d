import { type Environment, LocalFs, TetherError } from '@tether/client';
import type { Command } from 'commander';
import { type CliIo, connectOptions, connectorOf, formatBytes, printable, report, type SetExit } from '../common.js';
import { copy, type Endpoint } from '../copy.js';
import { namingFs } from '../fs-errors.js';
import { type ConnectFlags, type Location, openEnvironment, parseLocation } from '../target.js';

export function registerCp(program: Command, io: CliIo, setExit: SetExit): void {
  connectOptions(
    program
      .command('cp')
      .description('copy files or directories between here and environments (ENV:/path); verified by sha256')
      .argument('<source>', 'local path or ENV:/path')
      .argument('<destination>', 'local path or ENV:/path (an existing directory receives the source inside it)')
      .option('-r, --recursive', 'copy directories', false)
      .option(
        '-p, --preserve',
        'keep permission bits and modification/access times (to the millisecond), as cp -p and scp -p; a remote side needs a Tether executor (fileMetadata)',
        false,
      )
      .option('-q, --quiet', 'no progress or summary', false),
  )
    .addHelpText(
      'after',
      `
Without -p a new file keeps its source's permission bits less the destination's umask, as cp and scp give
it (a 0700 script arrives 0700 with umask 022); an existing file keeps its own mode. Modes need a Tether
executor (fileMetadata) on the remote side; against a Codex exec-server files get its default mode.
Symbolic links: the source named here is followed (as cp and scp do); a link inside a tree (-r) is never
made nor followed, in either direction: each is skipped and named on stderr ("harness: skipped the symbolic
link …"), as rsync -r skips them, and so is a socket, FIFO or device. Exit status: 0 when every file was
copied (skipped entries included); 1 for a local failure or a file that cannot be read or written (the
path is named: ENV:/path: No such file or directory); 255 when the environment cannot be reached.`,
    )
    .action(
      async (
        source: string,
        destination: string,
        options: ConnectFlags & { recursive: boolean; preserve: boolean; quiet: boolean },
      ) => {
        setExit(await cpCommand(source, destination, options, io));
      },
    );
}

async function cpCommand(
  sourceText: string,
  destinationText: string,
  options: ConnectFlags & { recursive: boolean; preserve: boolean; quiet: boolean },
  io: CliIo,
): Promise<number> {
  const opened = new Map<string, Environment>();
  const started = Date.now();
  try {
    const endpoint = async (location: Location, text: string): Promise<Endpoint> => {
      // Failures name the path as written: `ENV:/path: No such file or directory` (fs-errors.ts).
      if (location.kind === 'local') {
        return { fs: namingFs(new LocalFs(), ''), env: null, path: location.path, label: text };
      }
      let env = opened.get(location.environmentId);
      if (!env) {
        env = await openEnvironment(options, io.env, location.environmentId, connectorOf(io));
        opened.set(location.environmentId, env);
      }
      return { fs: namingFs(env.fs, `${location.environmentId}:`), env, path: location.path, label: text };
    };
    const from = parseLocation(sourceText);
    const to = parseLocation(destinationText);
    if (options.url && from.kind === 'remote' && to.kind === 'remote' && from.environmentId !== to.environmentId) {
      throw new TetherError(
        'invalid_argument',
        '--url reaches one executor; a copy between two environments goes through the registry (drop --url)',
      );
    }
    const source = await endpoint(from, sourceText);
    const destination = await endpoint(to, destinationText);
    const progress = !options.quiet && io.stderr.isTTY === true;
    let lastDraw = 0;
    const sourcePrefix = from.kind === 'remote' ? `${from.environmentId}:` : '';
    const stats = await copy(source, destination, {
      recursive: options.recursive,
      preserve: options.preserve,
      // Said even with -q: what was left out is not progress.
      onSkip: (path, kind) => {
        if (progress) io.stderr.write('\r\u001b[2K');
        const what = kind === 'link' ? 'the symbolic link' : 'the special file';
        const why = kind === 'link' ? 'cp -r copies no links' : 'not a regular file';
        io.stderr.write(`harness: skipped ${what} ${printable(`${sourcePrefix}${path}`)} (${why})\n`);
      },
      onProgress: progress
        ? (file, done, total) => {
            const now = Date.now();
            if (now - lastDraw < 100 && done < total) return;
            lastDraw = now;
            const percent = total > 0 ? Math.floor((done / total) * 100) : 100;
            const rate = done / Math.max((now - started) / 1000, 0.001);
            io.stderr.write(
              `\r\u001b[2K${printable(basenameOf(file))}  ${percent}%  ${formatBytes(done)}  ${formatBytes(rate)}/s`,
            );
          }
        : undefined,
    });
    if (progress) io.stderr.write('\r\u001b[2K');
    if (!options.quiet) {
      const seconds = Math.max((Date.now() - started) / 1000, 0.001);
      io.stderr.write(
        `copied ${stats.files} file(s)${stats.directories ? ` in ${stats.directories} dir(s)` : ''}, ${formatBytes(stats.bytes)} in ${seconds.toFixed(2)} s (${formatBytes(stats.bytes / seconds)}/s), sha256 verified${stats.skipped ? `; skipped ${stats.skipped} (named above)` : ''}\n`,
      );
    }
    return 0;
  } catch (err) {
    return report(io, err);
  } finally {
    for (const env of opened.values()) await env.close();
  }
}

function basenameOf(path: string): string {
  return path.slice(path.lastIndexOf('/') + 1) || path;
}
