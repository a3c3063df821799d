#!/usr/bin/env node
// The local stack on embedded defaults: a registry (SQLite), a relay and an executor in remote mode,
// wired together, plus a harness key. Runs until Ctrl-C (or SIGTERM), then stops all three.
//
//   node scripts/stack.mjs [--data-dir DIR] [--registry-port 8080] [--relay-port 8081] [--environment-id local]
//
// Everything it creates (database, signing key, API keys) lives in the data directory (default ./data);
// a second start reuses it. Each key is scoped to what its holder needs: the relay's may only heartbeat its own
// node URL, the executor's and harness's act on the one environment. The harness key is written to DATA/harness.key
// (mode 0600); the executor reads its key from DATA/executor.key, never from its environment.
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { ensureSupportedNode } from './runtime.mjs';

await ensureSupportedNode('stack');

const root = fileURLToPath(new URL('..', import.meta.url));
const { values } = parseArgs({
  options: {
    'data-dir': { type: 'string', default: 'data' },
    'registry-port': { type: 'string', default: '8080' },
    'relay-port': { type: 'string', default: '8081' },
    'environment-id': { type: 'string', default: 'local' },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  process.stdout.write(
    'usage: node scripts/stack.mjs [--data-dir DIR] [--registry-port N] [--relay-port N] [--environment-id ID]\n' +
      'Starts a registry (SQLite), a relay and an executor (remote mode) on 127.0.0.1; Ctrl-C stops them.\n',
  );
  process.exit(0);
}

const dataDir = resolve(values['data-dir']);
const environmentId = values['environment-id'];
const registryUrl = `http://127.0.0.1:${values['registry-port']}`;
const relayUrl = `ws://127.0.0.1:${values['relay-port']}`;
const database = `sqlite:${join(dataDir, 'registry.db')}`;
const bin = (app) => join(root, 'apps', app, 'dist', 'main.js');
for (const app of ['registry', 'relay', 'executor', 'harness']) {
  if (!existsSync(bin(app))) {
    process.stderr.write(`stack: ${bin(app)} is missing; build first (npm run build)\n`);
    process.exit(1);
  }
}
mkdirSync(dataDir, { recursive: true, mode: 0o700 });

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
  if (created.status !== 0) {
    process.stderr.write(`stack: cannot create the ${name} key:\n${created.stderr}`);
    process.exit(1);
  }
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

const children = [];
let stopping = false;

/** Starts a service; resolves with its first stdout line (the bound URL) once printed. */
function start(name, args, env) {
  const child = spawn(process.execPath, args, {
    env: { ...process.env, ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  children.push({ name, child });
  const logFile = join(dataDir, `${name}.log`);
  writeFileSync(logFile, '');
  child.stderr.on('data', (chunk) => writeFileSync(logFile, chunk, { flag: 'a' }));
  child.once('exit', (code, signal) => {
    if (!stopping) {
      process.stderr.write(`stack: ${name} exited (${signal ?? code}); see ${logFile}\n`);
      stop(1);
    }
  });
  return new Promise((resolveLine, reject) => {
    const lines = createInterface({ input: child.stdout });
    lines.once('line', (line) => resolveLine(line.trim()));
    child.once('exit', () => reject(new Error(`${name} exited before it was ready; see ${logFile}`)));
  });
}

async function stop(code) {
  if (stopping) return;
  stopping = true;
  for (const { child } of [...children].reverse()) {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
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
}
process.on('SIGINT', () => stop(0));
process.on('SIGTERM', () => stop(0));

try {
  await start(
    'registry',
    [
      bin('registry'),
      'serve',
      '--listen',
      `127.0.0.1:${values['registry-port']}`,
      '--database',
      database,
      '--relay-url',
      relayUrl,
      '--data-dir',
      dataDir,
    ],
    {},
  );
  await start(
    'relay',
    [
      bin('relay'),
      'serve',
      '--listen',
      `127.0.0.1:${values['relay-port']}`,
      '--public-url',
      relayUrl,
      '--registry',
      registryUrl,
    ],
    { TETHER_RELAY_REGISTRY_TOKEN: relayKey },
  );
  // The executor prints nothing on stdout in remote mode: wait for its registration in the log instead.
  const executor = spawn(
    process.execPath,
    [
      bin('executor'),
      '--registry',
      registryUrl,
      '--environment-id',
      environmentId,
      '--api-key-file',
      join(dataDir, 'executor.key'),
    ],
    // A key the caller happens to have in its environment must not reach the executor (or compete with the file).
    { env: withoutApiKeys(process.env), stdio: ['ignore', 'ignore', 'pipe'] },
  );
  children.push({ name: 'executor', child: executor });
  const executorLog = join(dataDir, 'executor.log');
  writeFileSync(executorLog, '');
  await new Promise((ready, fail) => {
    const lines = createInterface({ input: executor.stderr });
    // The executor's last plain-text line says why it gave up (a revoked key, another executor took over).
    let reason = '';
    let up = false;
    lines.on('line', (line) => {
      writeFileSync(executorLog, `${line}\n`, { flag: 'a' });
      if (!line.startsWith('{')) reason = line;
      if (line.includes('relay link up')) {
        up = true;
        ready();
      }
    });
    executor.once('exit', (code) => {
      if (stopping) return;
      const error = new Error(`executor exited (${code}); see ${executorLog}${reason ? `\n  ${reason}` : ''}`);
      if (!up) return fail(error); // reported and stopped below
      process.stderr.write(`stack: ${error.message}\n`);
      stop(1);
    });
  });
} catch (err) {
  process.stderr.write(`stack: ${err.message}\n`);
  await stop(1);
}

const harness = `node ${join('apps', 'harness', 'bin', 'harness.js')}`;
process.stdout.write(`Tether is running on 127.0.0.1:
  registry  ${registryUrl}   (SQLite: ${join(dataDir, 'registry.db')})
  relay     ${relayUrl}
  executor  environment "${environmentId}", reached only through the relay (logs in ${dataDir}/*.log)

In another terminal:
  export TETHER_HARNESS_REGISTRY=${registryUrl} TETHER_HARNESS_ENVIRONMENT_ID=${environmentId}
  export TETHER_HARNESS_API_KEY=$(cat ${join(values['data-dir'], 'harness.key')})
  ${harness} exec -- uname -a
  ${harness} cp README.md ${environmentId}:/tmp/README.md && ${harness} cat ${environmentId}:/tmp/README.md
  ${harness} login --web   # a one-time link to the browser terminal, ${registryUrl}/ui/

Ctrl-C stops everything.
`);
