/**
 * What `npm run quickstart` (scripts/quickstart.mjs, before it installs and builds) and scripts/stack.mjs check
 * before they start anything or touch a file: the flags, that no stack runs from the data directory (its lock,
 * DATA/stack.pid), and that both ports are free. Each problem is said in one line with its fix, and the script
 * exits 1.
 *
 * The lock is a pid file made with an exclusive create: a start finds it held when the pid in it is a live
 * quickstart.mjs or stack.mjs; one left by a stack that was killed (SIGKILL, a crash) is taken over. It is
 * removed when its process exits. Both scripts import this before ensureSupportedNode re-runs them on a newer
 * Node, so nothing runs at the top level here.
 */
import { linkSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { basename, isAbsolute, join, relative, resolve } from 'node:path';
import { parseArgs } from 'node:util';

/** DATA/stack.pid: the pid of the process running the stack from DATA. */
export const LOCK_FILE = 'stack.pid';

export const USAGE =
  'usage: node scripts/stack.mjs [--data-dir DIR] [--registry-port N] [--relay-port N] [--environment-id ID]\n' +
  '       npm run quickstart -- [the same flags]\n' +
  'Starts a registry (SQLite), a relay and an executor (remote mode) on 127.0.0.1; Ctrl-C stops them.\n' +
  'Defaults: --data-dir data, --registry-port 8080, --relay-port 8081, --environment-id local.\n';

/** `quickstart` when run by `npm run quickstart` (scripts/quickstart.mjs imports stack.mjs), else `stack`. */
export function scriptName() {
  return basename(process.argv[1] ?? '', '.mjs') === 'quickstart' ? 'quickstart' : 'stack';
}

/** Says `message` on stderr, prefixed with the script's name, and exits 1. */
export function fail(message) {
  process.stderr.write(`${scriptName()}: ${message}\n`);
  process.exit(1);
}

/**
 * The flags, checked. `dataDir` is absolute; `shownDataDir` is how to name it to the user: relative to where
 * the command was typed (`npm run quickstart` runs from the package's directory and says where it was typed
 * in INIT_CWD), absolute when it is not below it.
 */
export function parseStackArgs(args = process.argv.slice(2)) {
  let values;
  try {
    ({ values } = parseArgs({
      args,
      options: {
        'data-dir': { type: 'string', default: 'data' },
        'registry-port': { type: 'string', default: '8080' },
        'relay-port': { type: 'string', default: '8081' },
        'environment-id': { type: 'string', default: 'local' },
        help: { type: 'boolean', short: 'h', default: false },
      },
    }));
  } catch (err) {
    fail(`${err.message}\n${USAGE}`);
  }
  const port = (flag) => {
    const text = values[flag];
    const value = Number(text);
    if (!/^[0-9]+$/.test(text) || value < 1 || value > 65535) fail(`--${flag} must be a port (1-65535), got ${text}`);
    return value;
  };
  const registryPort = port('registry-port');
  const relayPort = port('relay-port');
  if (registryPort === relayPort) fail(`--registry-port and --relay-port are both ${registryPort}: pass two ports`);
  const dataDir = resolve(values['data-dir']);
  // Set by npm for the script it runs, and inherited by everything below it: only ours if we are that script.
  // biome-ignore lint/suspicious/noUndeclaredEnvVars: set by npm for the scripts it runs; these run outside turbo.
  const byNpm = ['quickstart', 'stack'].includes(process.env.npm_lifecycle_event ?? '');
  // biome-ignore lint/suspicious/noUndeclaredEnvVars: set by npm for the scripts it runs; these run outside turbo.
  const typedIn = (byNpm && process.env.INIT_CWD) || process.cwd();
  const below = relative(typedIn, dataDir);
  const shownDataDir = below === '' ? '.' : below.startsWith('..') || isAbsolute(below) ? dataDir : below;
  return {
    help: values.help,
    dataDir,
    shownDataDir,
    registryPort,
    relayPort,
    environmentId: values['environment-id'],
  };
}

function readPid(file) {
  try {
    const pid = Number(readFileSync(file, 'utf8').trim());
    return Number.isSafeInteger(pid) && pid > 0 ? pid : null;
  } catch {
    return null;
  }
}

/** Whether `pid` is a live quickstart.mjs or stack.mjs (the pid alone where there is no /proc). */
function isStack(pid) {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if (err.code !== 'EPERM') return false;
  }
  let stat;
  let cmdline;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    try {
      readFileSync('/proc/self/stat');
    } catch {
      return true; // no /proc here
    }
    return false; // gone meanwhile
  }
  const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  if (state === 'Z' || state === 'X') return false;
  // A pid reused by something else since its stack was killed does not hold the lock.
  return /(^|[/\0])(quickstart|stack)\.mjs\0/.test(cmdline);
}

/** The pid holding DATA's lock when that is another live stack, else null (no lock, a stale one, or ours). */
export function lockHolder(dataDir) {
  const pid = readPid(join(dataDir, LOCK_FILE));
  return pid !== null && pid !== process.pid && isStack(pid) ? pid : null;
}

function shownForMessage(shownDataDir) {
  return isAbsolute(shownDataDir) || shownDataDir.startsWith('.') ? shownDataDir : `./${shownDataDir}`;
}

function failRunning(pid, shownDataDir) {
  fail(
    `a stack is already running from ${shownForMessage(shownDataDir)} (pid ${pid}); stop it first or use --data-dir`,
  );
}

/** Resolves with null when 127.0.0.1:`port` can be listened on now, else with the error's code. */
export function listenProblem(port) {
  return new Promise((done) => {
    const server = createServer();
    server.once('error', (err) => done(err.code ?? err.message));
    server.listen({ host: '127.0.0.1', port, exclusive: true }, () => server.close(() => done(null)));
  });
}

/**
 * Checks, touching nothing, that no other stack runs from the data directory and that both ports are free;
 * says the first problem with its fix and exits 1.
 */
export async function preflight(options) {
  const holder = lockHolder(options.dataDir);
  if (holder !== null) failRunning(holder, options.shownDataDir);
  for (const [flag, port] of [
    ['--registry-port', options.registryPort],
    ['--relay-port', options.relayPort],
  ]) {
    const problem = await listenProblem(port);
    if (problem === 'EADDRINUSE') fail(`127.0.0.1:${port} is in use (another stack? stop it, or pass ${flag} N)`);
    if (problem !== null) fail(`cannot listen on 127.0.0.1:${port} (${problem}); pass ${flag} N`);
  }
}

/**
 * Takes DATA's lock for this process (creating DATA, mode 0700, if needed), or says which stack holds it and
 * exits 1. The pid file appears whole (written aside, then linked into place), so a concurrent start never
 * reads it half-written; it is removed when this process exits. Taking it again in the same process is a no-op.
 */
export function lockDataDir(options) {
  const { dataDir } = options;
  const file = join(dataDir, LOCK_FILE);
  if (readPid(file) === process.pid) return;
  const aside = `${file}.${process.pid}`;
  try {
    mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    writeFileSync(aside, `${process.pid}\n`);
  } catch (err) {
    fail(`cannot use ${options.shownDataDir} as the data directory: ${err.message}`);
  }
  let problem = null;
  for (let attempt = 0; ; attempt += 1) {
    try {
      try {
        linkSync(aside, file);
      } catch (err) {
        // A filesystem without hard links: an exclusive create (a reader may then see it empty for a moment).
        if (!['EPERM', 'ENOTSUP', 'EOPNOTSUPP', 'ENOSYS'].includes(err.code)) throw err;
        writeFileSync(file, `${process.pid}\n`, { flag: 'wx' });
      }
      break;
    } catch (err) {
      if (err.code !== 'EEXIST') {
        problem = `cannot lock ${file}: ${err.message}`;
        break;
      }
    }
    const holder = lockHolder(dataDir);
    if (holder !== null) {
      rmSync(aside, { force: true });
      failRunning(holder, options.shownDataDir);
    }
    if (attempt === 3) {
      problem = `cannot lock ${file}: it keeps coming back (another stack starting?)`;
      break;
    }
    // Left by a stack that is gone (killed, or crashed): take it over.
    rmSync(file, { force: true });
  }
  rmSync(aside, { force: true });
  if (problem !== null) fail(problem);
  process.on('exit', () => {
    if (readPid(file) === process.pid) rmSync(file, { force: true });
  });
}
