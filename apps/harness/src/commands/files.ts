import type { Command } from 'commander';
import {
  type CliIo,
  connectOptions,
  flushOutput,
  printable,
  type SetExit,
  withLocation,
  writeOutput,
} from '../common.js';
import type { Endpoint } from '../copy.js';
import type { ConnectFlags } from '../target.js';

/** `ls` and `cat`. */
export function registerFiles(program: Command, io: CliIo, setExit: SetExit): void {
  /** A command on one `<location>` that prints it to stdout; exit code 0 once the output is flushed. */
  const printing = (name: string, description: string, print: (fs: Endpoint['fs'], path: string) => Promise<void>) =>
    connectOptions(
      program.command(name).description(description).argument('<location>', 'ENV:/path or a local path'),
    ).action(async (location: string, options: ConnectFlags) => {
      setExit(
        await withLocation(io, options, location, async (fs, path) => {
          await print(fs, path);
          await flushOutput(io);
          return 0;
        }),
      );
    });

  printing('ls', 'list a directory on an environment', async (fs, path) => {
    const meta = await fs.getMetadata(path);
    if (!meta.isDirectory) {
      await writeOutput(io, io.stdout, `${path}\n`);
      return;
    }
    const entries = (await fs.readDirectory(path)).sort((a, b) => a.fileName.localeCompare(b.fileName));
    const show = io.stdout.isTTY ? printable : (name: string) => name;
    for (const entry of entries) {
      await writeOutput(io, io.stdout, `${show(entry.fileName)}${entry.isDirectory ? '/' : ''}\n`);
    }
  });

  printing('cat', 'print a file from an environment', async (fs, path) => {
    // A closed output ends the loop, and with it the read (the remote handle is closed).
    for await (const chunk of fs.createReadStream(path)) await writeOutput(io, io.stdout, chunk as Buffer);
  });
}
