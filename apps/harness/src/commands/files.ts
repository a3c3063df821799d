import type { Command } from 'commander';
import { type CliIo, connectOptions, printable, type SetExit, withLocation } from '../common.js';
import type { ConnectFlags } from '../target.js';

/** `ls` and `cat`. */
export function registerFiles(program: Command, io: CliIo, setExit: SetExit): void {
  connectOptions(
    program
      .command('ls')
      .description('list a directory on an environment')
      .argument('<location>', 'ENV:/path or a local path'),
  ).action(async (location: string, options: ConnectFlags) => {
    setExit(
      await withLocation(io, options, location, async (fs, path) => {
        const meta = await fs.getMetadata(path);
        if (!meta.isDirectory) {
          io.stdout.write(`${path}\n`);
          return 0;
        }
        const entries = (await fs.readDirectory(path)).sort((a, b) => a.fileName.localeCompare(b.fileName));
        const show = io.stdout.isTTY ? printable : (name: string) => name;
        for (const entry of entries) io.stdout.write(`${show(entry.fileName)}${entry.isDirectory ? '/' : ''}\n`);
        return 0;
      }),
    );
  });

  connectOptions(
    program
      .command('cat')
      .description('print a file from an environment')
      .argument('<location>', 'ENV:/path or a local path'),
  ).action(async (location: string, options: ConnectFlags) => {
    setExit(
      await withLocation(io, options, location, async (fs, path) => {
        for await (const chunk of fs.createReadStream(path)) {
          if (!io.stdout.write(chunk as Buffer)) await new Promise((resolve) => io.stdout.once('drain', resolve));
        }
        return 0;
      }),
    );
  });
}
