#!/usr/bin/env node
// The local stack on embedded defaults: a registry (SQLite), a relay and an executor in remote mode,
// wired together, plus a harness key. Runs until Ctrl-C (or SIGTERM, or SIGHUP when its terminal closes), then
// stops all three; killed outright, it leaves none of them running either.
//
//   node scripts/stack.mjs [--data-dir DIR] [--registry-port 8080] [--relay-port 8081] [--environment-id local]
//
// Everything it creates (database, signing key, API keys, logs) lives in the data directory (default ./data);
// a later start reuses it. Each key is scoped to what its holder needs: the relay's may only heartbeat its own
// node URL, the executor's and harness's act on the one environment. The harness key is written to DATA/harness.key
// (mode 0600); the executor reads its key from DATA/executor.key, never from its environment.
//
// A start beside a running stack touches nothing: the data directory's lock (DATA/stack.pid) and both ports are
// checked first (scripts/stack-preflight.mjs), each problem said with its fix. Each start's logs are
// DATA/NAME.log; the previous start's are kept as DATA/NAME.log.1. Once running, it leaves DATA/env.sh to
// source: the harness on PATH (DATA/bin/harness), pointed at this stack.
import { spawn, spawnSync } from 'node:child_process';
import { appendFileSync, chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { endWithParent, ensureSupportedNode } from './runtime.mjs';
import { fail, lockDataDir, parseStackArgs, preflight, scriptName, USAGE } from './stack-preflight.mjs';

await ensureSupportedNode('stack');
// Run by npm (npm run quickstart / npm run stack), it stops when npm is gone, however npm ended.
// biome-ignore lint/suspicious/noUndeclaredEnvVars: set by npm for the scripts it runs; these run outside turbo.
if (process.env.npm_lifecycle_event) endWithParent();

const root = fileURLToPath(new URL('..', import.meta.url));
const options = parseStackArgs();
if (options.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}
const me = scriptName();
const { dataDir, environmentId } = options;
const registryUrl = `http://127.0.0.1:${options.registryPort}`;
const relayUrl = `ws://127.0.0.1:${options.relayPort}`;
const database = `sqlite:${join(dataDir, 'registry.db')}`;
const bin = (app) => join(root, 'apps', app, 'dist', 'main.js');
for (const app of ['registry', 'relay', 'executor', 'harness']) {
  if (!existsSync(bin(app))) fail(`${bin(app)} is missing; build first (npm run build)`);
}
// Nothing is started and no file touched before these: a port in use or a stack already running from the
// data directory is said with its fix. Then the data directory is ours until this process exits.
await preflight(options);
lockDataDir(options);

// Stopped by Ctrl-C, SIGTERM or a closed terminal (SIGHUP), it stops its services first (stop() below).
const children = [];
let stopped = null;
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(signal, () => stop(0));

/**
 * Returns the token stored in DATA/NAME.key, creating the key in the registry's database first with the given
 * `keys create` flags (its scope). Writes the file before returning, so its path can be handed over instead.
 */
function key(name, role, scope) {
  const file = join(dataDir, `${name}.key`);
  // The scope a key was made with is kept beside it: a key for another environment id or relay port is of no
  // use (a relay key heartbeats only its own URL), so a start with other flags makes a new one.
  const scopeFile = `${file}.scope`;
  const wanted = scope.join(' ');
  const had = existsSync(scopeFile) ? readFileSync(scopeFile, 'utf8').trim() : wanted;
  if (existsSync(file) && had === wanted) return readFileSync(file, 'utf8').trim();
  const created = spawnSync(
    process.execPath,
    [bin('registry'), 'keys', 'create', '--database', database, '--role', role, ...scope, '--label', `stack ${name}`],
    { encoding: 'utf8' },
  );
  if (created.status !== 0) fail(`cannot create the ${name} key:\n${created.stderr.trimEnd()}`);
  writeFileSync(file, `${created.stdout.trim()}\n`, { mode: 0o600 });
  chmodSync(file, 0o600);
  writeFileSync(scopeFile, `${wanted}\n`);
  return created.stdout.trim();
}

// The relay gets a relay-role key (heartbeats for its own URL only), not an admin key.
const relayKey = key('relay', 'relay', ['--relay-url', relayUrl]);
key('executor', 'executor', ['--environments', environmentId]);
key('harness', 'harness', ['--environments', environmentId]);

/** `env` without the variables an executor would take an API key from (current, Codex's and deprecated). */
function withoutApiKeys(env) {
  const {
    TETHER_EXECUTOR_API_KEY: _e,
    TETHER_EXECUTOR_API_KEY_FILE: _ef,
    TETHER_API_KEY: _t,
    TETHER_API_KEY_FILE: _f,
    CODEX_API_KEY: _c,
    ...rest
  } = env;
  return rest;
}

const LOG_NAMES = ['registry', 'relay', 'executor'];
// Each start writes new logs; the previous start's are kept as NAME.log.1 (a start that fails before this
// point, e.g. beside a running stack, has touched none).
for (const name of LOG_NAMES) {
  const log = join(dataDir, `${name}.log`);
  if (existsSync(log)) renameSync(log, `${log}.1`);
  writeFileSync(log, '', { flag: 'a' });
}

/**
 * Starts a service, its stderr appended to DATA/NAME.log line by line; resolves once `isReady(line, stream)`
 * holds for a line of its stdout or stderr. Exiting before that rejects with its own words on why (a port
 * taken meanwhile, a refused key, a bad variable); exiting after it stops the stack.
 *
 * Each service runs in its own session (`detached`): Ctrl-C or a closed terminal reaches only this process,
 * which then sends each service SIGTERM, its graceful path (a SIGHUP would kill it outright). Its stdin is a pipe from this process
 * that it stops on when it closes (exit-with-stack.mjs, the executor's --exit-on-stdin-close), so that no
 * service outlives the stack even when the stack is killed with SIGKILL.
 */
function start(name, args, { env, stdout, isReady }) {
  const child = spawn(process.execPath, args, {
    env,
    stdio: ['pipe', stdout ? 'pipe' : 'ignore', 'pipe'],
    detached: true,
  });
  children.push({ name, child });
  const logFile = join(dataDir, `${name}.log`);
  // Its own words on why it ended: the last plain-text line saying `error: …` or `NAME: …` (not a usage text
  // after it), else its last plain-text line.
  let reason = '';
  let said = false;
  let ready = false;
  return new Promise((resolveReady, reject) => {
    const seen = (line, stream) => {
      if (!ready && isReady(line, stream)) {
        ready = true;
        resolveReady();
      }
    };
    createInterface({ input: child.stderr }).on('line', (line) => {
      appendFileSync(logFile, `${line}\n`);
      const plain = line.trim() !== '' && !line.startsWith('{');
      if (plain && /^(error|[a-z][\w-]*): /i.test(line) && !/^usage: /i.test(line)) {
        reason = line.trim();
        said = true;
      } else if (plain && !said) {
        reason = line.trim();
      }
      seen(line, 'stderr');
    });
    if (stdout) createInterface({ input: child.stdout }).on('line', (line) => seen(line, 'stdout'));
    child.once('exit', (code, signal) => {
      if (stopped) return;
      const what = `${name} exited (${signal ?? code}); see ${logFile}${reason ? `\n  ${reason}` : ''}`;
      if (!ready) return reject(new Error(what));
      process.stderr.write(`${me}: ${what}\n`);
      stop(1);
    });
  });
}

/** Stops every service (SIGTERM, then SIGKILL after 5 s), then exits with `code`; once, however often called. */
function stop(code) {
  stopped ??= (async () => {
    for (const { child } of [...children].reverse()) {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      // Its stdin closed too: the executor, with --exit-on-stdin-close, exits only once it is.
      child.stdin.destroy();
    }
    await Promise.all(
      children.map(
        ({ child }) =>
          new Promise((done) => {
            if (child.exitCode !== null || child.signalCode !== null) return done();
            const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
            child.once('exit', () => {
              clearTimeout(timer);
              done();
            });
          }),
      ),
    );
    process.exit(code);
  })();
  return stopped;
}

const exitWithStack = ['--import', pathToFileURL(join(root, 'scripts', 'exit-with-stack.mjs')).href];

try {
  await start(
    'registry',
    [
      ...exitWithStack,
      bin('registry'),
      'serve',
      '--listen',
      `127.0.0.1:${options.registryPort}`,
      '--database',
      database,
      '--relay-url',
      relayUrl,
      '--data-dir',
      dataDir,
    ],
    // Ready when it prints its URL.
    { env: process.env, stdout: true, isReady: (_line, stream) => stream === 'stdout' },
  );
  await start(
    'relay',
    [
      ...exitWithStack,
      bin('relay'),
      'serve',
      '--listen',
      `127.0.0.1:${options.relayPort}`,
      '--public-url',
      relayUrl,
      '--registry',
      registryUrl,
    ],
    {
      env: { ...process.env, TETHER_RELAY_REGISTRY_TOKEN: relayKey },
      stdout: true,
      isReady: (_line, stream) => stream === 'stdout',
    },
  );
  // The executor prints nothing on stdout in remote mode: ready at its registration, in its log.
  await start(
    'executor',
    [
      bin('executor'),
      '--registry',
      registryUrl,
      '--environment-id',
      environmentId,
      '--api-key-file',
      join(dataDir, 'executor.key'),
      '--exit-on-stdin-close',
    ],
    // A key the caller happens to have in its environment must not reach the executor (or compete with the file).
    { env: withoutApiKeys(process.env), stdout: false, isReady: (line) => line.includes('relay link up') },
  );
} catch (err) {
  process.stderr.write(`${me}: ${err.message}\n`);
  await stop(1);
}

/** `text` quoted for a POSIX shell. */
const shellQuote = (text) => `'${text.replaceAll("'", `'\\''`)}'`;
/** `path` as typed in a shell: bare when it needs no quoting. */
const shellPath = (path) => (/^[\w./-]+$/.test(path) ? path : shellQuote(path));

/** Writes `file` whole (a temporary file renamed over it): a shell sourcing it never reads half of it. */
function writeWhole(file, text, mode) {
  const temp = `${file}.${process.pid}.tmp`;
  writeFileSync(temp, text, { mode });
  chmodSync(temp, mode);
  renameSync(temp, file);
}

// DATA/env.sh, for `source`: this checkout's harness on PATH (DATA/bin/harness, run by the Node that runs the
// stack, which on a machine whose own Node is too old is the pinned one), and the variables the harness reads
// (apps/harness/src/target.ts) pointing at this stack, with the key by its file.
const binDir = join(dataDir, 'bin');
mkdirSync(binDir, { recursive: true, mode: 0o700 });
writeWhole(
  join(binDir, 'harness'),
  `#!/bin/sh
# Written by scripts/stack.mjs: this checkout's harness, on the Node that runs the stack.
exec ${shellQuote(process.execPath)} ${shellQuote(join(root, 'apps', 'harness', 'bin', 'harness.js'))} "$@"
`,
  0o755,
);
writeWhole(
  join(dataDir, 'env.sh'),
  `# Written by scripts/stack.mjs for the stack it runs from ${dataDir}; \`source\` it (bash, zsh, sh: \`.\`) for a
# shell whose harness reaches that stack's environment "${environmentId}".
case ":$PATH:" in *:${shellQuote(binDir)}:*) ;; *) PATH=${shellQuote(binDir)}:"$PATH" ;; esac
export PATH
export TETHER_HARNESS_REGISTRY=${shellQuote(registryUrl)}
export TETHER_HARNESS_ENVIRONMENT_ID=${shellQuote(environmentId)}
export TETHER_HARNESS_API_KEY_FILE=${shellQuote(join(dataDir, 'harness.key'))}
# Each would win over the lines above (another key, an executor's address or key), or is an older name
# of one of them that the harness would read with a warning.
unset TETHER_HARNESS_API_KEY TETHER_HARNESS_URL TETHER_HARNESS_EXECUTOR_KEY TETHER_HARNESS_CONTEXT
unset TETHER_API_KEY TETHER_API_KEY_FILE TETHER_REGISTRY_URL TETHER_ENVIRONMENT_ID TETHER_EXECUTOR_URL
unset TETHER_EXECUTOR_KEY_FILE TETHER_CONTEXT
`,
  0o600,
);

process.stdout.write(`Tether is running on 127.0.0.1:
  registry  ${registryUrl}   (SQLite: ${join(dataDir, 'registry.db')})
  relay     ${relayUrl}
  executor  environment "${environmentId}", reached only through the relay (logs in ${dataDir}/*.log)

In another terminal (the first line puts harness on PATH and points it at this stack):
  source ${shellPath(join(options.shownDataDir, 'env.sh'))}
  harness exec -- uname -a
  harness cp README.md ${environmentId}:/tmp/README.md && harness cat ${environmentId}:/tmp/README.md
  harness login --web   # a one-time link to the browser terminal, ${registryUrl}/ui/

Ctrl-C stops everything.
`);
