import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type PeerHandle, type Stack, startPeer, startStack } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliRunner } from './__tests__/cli-runner.js';
import { parseLocation } from './target.js';

const work = mkdtempSync(join(tmpdir(), 'tether-harness-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const harness = cliRunner(work);

describe('locations', () => {
  it('parses ENV:/path and local paths', () => {
    expect(parseLocation('dev-1:/tmp/x')).toEqual({ kind: 'remote', environmentId: 'dev-1', path: '/tmp/x' });
    expect(parseLocation('./file')).toEqual({ kind: 'local', path: './file' });
    expect(parseLocation('/abs/with:colon')).toEqual({ kind: 'local', path: '/abs/with:colon' });
    expect(() => parseLocation('dev-1:relative')).toThrow('must be absolute');
  });
});

describe('harness CLI through the registry and relay', () => {
  let stack: Stack;
  let peer: PeerHandle;
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    // The real registry, relay and `executor --remote` processes.
    stack = await startStack();
    peer = await stack.startExecutor('tether', 'env-cli');
    env = {
      TETHER_HARNESS_REGISTRY: stack.registryUrl,
      TETHER_HARNESS_ENVIRONMENT_ID: 'env-cli',
      TETHER_HARNESS_API_KEY: stack.keys.harness,
    };
  });
  afterAll(async () => {
    await peer?.close();
    await stack?.close();
  });

  it('exec streams output and returns the remote exit code', async () => {
    const result = await harness(['exec', '--cwd', work, '--', '/bin/sh', '-c', 'echo out; echo err >&2; exit 4'], env);
    expect(result).toEqual({ code: 4, stdout: 'out\n', stderr: 'err\n' });
  });

  it('exec -i forwards stdin until it ends', async () => {
    const result = await harness(['exec', '-i', '--', 'tr', 'a-z', 'A-Z'], env, 'shout please\n');
    expect(result.stdout).toBe('SHOUT PLEASE\n');
    expect(result.code).toBe(0);
  });

  it('exec -t runs in a terminal and -ti forwards keystrokes to it', async () => {
    const plain = await harness(['exec', '--', '/bin/sh', '-c', 'test -t 1 && echo tty || echo no-tty'], env);
    expect(plain.stdout).toBe('no-tty\n');
    const tty = await harness(['exec', '-t', '--', '/bin/sh', '-c', 'test -t 1 && echo tty || echo no-tty'], env);
    expect(tty.stdout).toBe('tty\r\n');
    const interactive = await harness(
      ['exec', '-t', '-i', '--', '/bin/sh', '-c', 'read line; echo "got:$line"'],
      env,
      'typed\n',
    );
    expect(interactive.stdout).toContain('got:typed');
    expect(interactive.code).toBe(0);
  });

  it('exec -i delivers a large stdin whole and in order', async () => {
    const input = Array.from({ length: 60_000 }, (_, i) => `line ${i}\n`).join('');
    const result = await harness(['exec', '-i', '--', 'sha256sum'], env, input);
    expect(result.code).toBe(0);
    expect(result.stdout.split(' ')[0]).toBe(createHash('sha256').update(input).digest('hex'));
  });

  it('exec -e sets variables; --clean-env starts empty', async () => {
    const result = await harness(['exec', '--clean-env', '-e', 'ONLY=1', '--', '/usr/bin/env'], env);
    expect(result.stdout).toBe('ONLY=1\n');
  });

  it('says what is missing when there is no registry or key', async () => {
    const noRegistry = await harness(['exec', '--', 'true'], { TETHER_HARNESS_API_KEY: 'x' });
    expect(noRegistry.code).toBe(2);
    expect(noRegistry.stderr).toContain('--registry');
    const noKey = await harness(['exec', '--', 'true'], { ...env, TETHER_HARNESS_API_KEY: '' });
    expect(noKey.code).toBe(2);
    expect(noKey.stderr).toContain('TETHER_HARNESS_API_KEY');
  });

  it('a wrong API key is reported without echoing it, and exits 255 as ssh does', async () => {
    const result = await harness(['exec', '--', 'true'], { ...env, TETHER_HARNESS_API_KEY: 'wrong-key-123' });
    expect(result.code).toBe(255);
    expect(result.stderr).toContain('refused the harness API key');
    expect(result.stderr).not.toContain('wrong-key-123');
  });

  it('--help is available on every command', async () => {
    for (const command of [
      [],
      ['exec'],
      ['shell'],
      ['cp'],
      ['ls'],
      ['cat'],
      ['config'],
      ['config', 'set-context'],
      ['completion'],
    ]) {
      const result = await harness([...command, '--help'], {});
      expect(result.code).toBe(0);
      expect(result.stdout).toContain('Usage: harness');
    }
  });

  it('a context supplies the registry, environment and API key file; flag > variable > context', async () => {
    const dir = mkdtempSync(join(work, 'ctx-'));
    const config = join(dir, 'conf', 'config.toml');
    const keyFile = join(dir, 'harness.key');
    writeFileSync(keyFile, `${stack.keys.harness}\n`, { mode: 0o600 });
    const only = { TETHER_CONFIG: config };
    const set = await harness(
      [
        'config',
        'set-context',
        'dev',
        '--registry',
        stack.registryUrl,
        '--environment-id',
        'env-cli',
        '--api-key-file',
        keyFile,
        '--use',
      ],
      only,
    );
    expect(set).toMatchObject({ code: 0, stdout: 'Context "dev" created.\n' });
    expect(statSync(config).mode & 0o777).toBe(0o600);
    expect(readdirSync(join(dir, 'conf'))).toEqual(['config.toml']);
    const ok = await harness(['exec', '--', '/bin/sh', '-c', 'echo from-context'], only);
    expect(ok).toEqual({ code: 0, stdout: 'from-context\n', stderr: '' });

    // A second context, current, that names an environment with no executor: the variable and then the
    // flag win over it, and --context picks the first one again.
    expect(
      (await harness(['config', 'set-context', 'other', '--environment-id', 'env-nobody', '--use'], only)).code,
    ).toBe(0);
    expect(
      (
        await harness(
          ['config', 'set-context', 'other', '--registry', stack.registryUrl, '--api-key-file', keyFile],
          only,
        )
      ).stdout,
    ).toBe('Context "other" modified.\n');
    const fromContext = await harness(['exec', '--connect-timeout', '1', '--', 'true'], only);
    expect(fromContext.code).toBe(255);
    expect(fromContext.stderr).toContain('env-nobody');
    expect((await harness(['exec', '--', 'true'], { ...only, TETHER_HARNESS_ENVIRONMENT_ID: 'env-cli' })).code).toBe(0);
    const flagWins = await harness(['exec', '--connect-timeout', '1', '--environment-id', 'env-flag', '--', 'true'], {
      ...only,
      TETHER_HARNESS_ENVIRONMENT_ID: 'env-cli',
    });
    expect(flagWins.stderr).toContain('env-flag');
    expect((await harness(['exec', '--context', 'dev', '--', 'true'], only)).code).toBe(0);
    expect((await harness(['exec', '--', 'true'], { ...only, TETHER_HARNESS_CONTEXT: 'dev' })).code).toBe(0);
    // The key itself from the variable beats the context's file.
    const wrongKey = await harness(['exec', '--context', 'dev', '--', 'true'], {
      ...only,
      TETHER_HARNESS_API_KEY: 'wrong-key-789',
    });
    expect(wrongKey.code).toBe(255);

    const listed = await harness(['config', 'get-contexts'], only);
    expect(listed.stdout.split('\n')[0]).toMatch(/^CURRENT\s+NAME\s+REGISTRY\s+ENVIRONMENT\s+API-KEY-FILE$/);
    expect(listed.stdout).toMatch(/^\s+dev\s+http:\/\/127\.0\.0\.1:\d+\s+env-cli\s+\S+harness\.key$/m);
    expect(listed.stdout).toMatch(/^\*\s+other\s/m);
    expect((await harness(['config', 'get-contexts', '-o', 'name'], only)).stdout).toBe('dev\nother\n');
    expect((await harness(['config', 'current-context'], only)).stdout).toBe('other\n');
    expect((await harness(['config', 'use-context', 'dev'], only)).stdout).toBe('Switched to context "dev".\n');
    expect((await harness(['config', 'current-context'], only)).stdout).toBe('dev\n');
    const view = await harness(['config', 'view'], only);
    expect(view.stdout).toContain(`# ${config}\ncurrent-context = "dev"`);
    expect(view.stdout).toContain(`api-key-file = "${keyFile}"`);
    expect(view.stdout).not.toContain(stack.keys.harness);
    expect((await harness(['config', 'delete-context', 'dev'], only)).stdout).toBe('Deleted context "dev".\n');
    expect((await harness(['config', 'current-context'], only)).code).toBe(1);
    expect((await harness(['config', 'use-context', 'dev'], only)).code).toBe(2);
    const missing = await harness(['exec', '--context', 'dev', '--', 'true'], only);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('no context "dev"');
    expect(statSync(config).mode & 0o777).toBe(0o600);
    expect(readdirSync(join(dir, 'conf'))).toEqual(['config.toml']);
  });

  it('an API key file others may read is refused, as ssh refuses such a key; --api-key-file reads one', async () => {
    const dir = mkdtempSync(join(work, 'keyfile-'));
    const keyFile = join(dir, 'open.key');
    writeFileSync(keyFile, stack.keys.harness, { mode: 0o644 });
    const { TETHER_HARNESS_API_KEY: _key, ...noKey } = env;
    const refused = await harness(['exec', '--api-key-file', keyFile, '--', 'true'], noKey);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain(`permissions 0644 for the API key file ${keyFile} are too open`);
    expect(refused.stderr).not.toContain(stack.keys.harness);
    const viaVariable = await harness(['exec', '--', 'true'], { ...noKey, TETHER_HARNESS_API_KEY_FILE: keyFile });
    expect(viaVariable.code).toBe(2);
    chmodSync(keyFile, 0o600);
    expect(await harness(['exec', '--api-key-file', keyFile, '--', '/bin/echo', 'keyed'], noKey)).toEqual({
      code: 0,
      stdout: 'keyed\n',
      stderr: '',
    });
    expect((await harness(['exec', '--', 'true'], { ...noKey, TETHER_HARNESS_API_KEY_FILE: keyFile })).code).toBe(0);
    const gone = await harness(['exec', '--api-key-file', join(dir, 'nope.key'), '--', 'true'], noKey);
    expect(gone.code).toBe(2);
    expect(gone.stderr).toContain('cannot read the API key file');
  });

  it('an unknown command is a usage error', async () => {
    const result = await harness(['frobnicate'], {});
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("unknown command 'frobnicate'");
  });

  it('cp copies a local file to a local path with a sha256 check', async () => {
    const source = join(work, 'local-src.bin');
    writeFileSync(source, randomBytes(100_000));
    const result = await harness(['cp', source, join(work, 'local-dst.bin')], {});
    expect(result.code).toBe(0);
    expect(result.stderr).toContain('sha256 verified');
    expect(readFileSync(join(work, 'local-dst.bin'))).toEqual(readFileSync(source));
  });

  it('cp draws progress on a terminal, and only there', async () => {
    const source = join(work, 'progress-src.bin');
    writeFileSync(source, randomBytes(2 * 1024 * 1024));
    const onTerminal = await harness(['cp', source, join(work, 'progress-a.bin')], {}, undefined, {
      stderrIsTTY: true,
    });
    expect(onTerminal.code).toBe(0);
    expect(onTerminal.stderr).toContain('progress-src.bin  100%');
    const piped = await harness(['cp', source, join(work, 'progress-b.bin')], {});
    expect(piped.stderr).not.toContain('%');
    const quiet = await harness(['cp', '-q', source, join(work, 'progress-c.bin')], {}, undefined, {
      stderrIsTTY: true,
    });
    expect(quiet.stderr).toBe('');
  });

  it('cp refuses a directory without -r', async () => {
    mkdirSync(join(work, 'a-dir'), { recursive: true });
    const result = await harness(['cp', join(work, 'a-dir'), join(work, 'b-dir')], {});
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('use -r');
  });

  it('cp up to the environment, back down, and a tree both ways: bytes and digests equal', async () => {
    const data = randomBytes(3 * 1024 * 1024 + 17);
    const local = join(work, 'up.bin');
    writeFileSync(local, data);
    const remoteDir = mkdtempSync(join(tmpdir(), 'tether-remote-'));
    try {
      const up = await harness(['cp', local, `env-cli:${remoteDir}/up.bin`], env);
      expect(up.stderr).toContain('sha256 verified');
      expect(up.code).toBe(0);
      expect(readFileSync(join(remoteDir, 'up.bin')).equals(data)).toBe(true);

      const down = await harness(['cp', `env-cli:${remoteDir}/up.bin`, join(work, 'down.bin')], env);
      expect(down.code).toBe(0);
      const digest = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');
      expect(digest(readFileSync(join(work, 'down.bin')))).toBe(digest(data));

      const tree = join(work, 'tree');
      mkdirSync(join(tree, 'nested', 'deeper'), { recursive: true });
      writeFileSync(join(tree, 'a.txt'), 'alpha\n');
      writeFileSync(join(tree, 'nested', 'b.txt'), 'beta\n');
      writeFileSync(join(tree, 'nested', 'deeper', 'c.bin'), randomBytes(70_000));
      const treeUp = await harness(['cp', '-r', tree, `env-cli:${remoteDir}`], env);
      expect(treeUp.code).toBe(0);
      expect(treeUp.stderr).toContain('copied 3 file(s)');
      expect(readFileSync(join(remoteDir, 'tree', 'nested', 'b.txt'), 'utf8')).toBe('beta\n');

      const listing = await harness(['ls', `env-cli:${remoteDir}/tree`], env);
      expect(listing.stdout).toBe('a.txt\nnested/\n');
      const cat = await harness(['cat', `env-cli:${remoteDir}/tree/a.txt`], env);
      expect(cat.stdout).toBe('alpha\n');

      const treeDown = await harness(['cp', '-r', `env-cli:${remoteDir}/tree`, join(work, 'tree-back')], env);
      expect(treeDown.code).toBe(0);
      expect(readFileSync(join(work, 'tree-back', 'nested', 'deeper', 'c.bin'))).toEqual(
        readFileSync(join(tree, 'nested', 'deeper', 'c.bin')),
      );
    } finally {
      rmSync(remoteDir, { recursive: true, force: true });
    }
  });

  it('cp over an existing, longer file leaves exactly the source, in the same file, both ways', async () => {
    const data = randomBytes(2 * 1024 * 1024 + 3);
    const source = join(work, 'over-src.bin');
    writeFileSync(source, data);
    for (const [from, to, path] of [
      [source, `env-cli:${work}/over-up.bin`, join(work, 'over-up.bin')],
      [`env-cli:${source}`, join(work, 'over-down.bin'), join(work, 'over-down.bin')],
    ] as const) {
      writeFileSync(path, randomBytes(5 * 1024 * 1024)); // longer than the copy, other bytes
      const inode = statSync(path).ino;
      const result = await harness(['cp', from, to], env);
      expect(result.code, result.stderr).toBe(0);
      expect(readFileSync(path).equals(data)).toBe(true);
      expect(statSync(path).ino).toBe(inode); // written in place, as scp does
    }
  });

  it('cp fails with the OS reason when the destination cannot be written, in both directions', async () => {
    const local = join(work, 'fail-src.bin');
    writeFileSync(local, randomBytes(2 * 1024 * 1024 + 5));
    // Up: the remote handle opens with the first block, into a directory that is not there.
    const up = await harness(['cp', local, `env-cli:${work}/no-such-dir/x.bin`], env);
    expect(up.code).toBe(1);
    expect(up.stderr).toMatch(/No such file|not found|ENOENT/i);
    // Down: the local file cannot be created; the remote read stream is stopped, nothing is left behind.
    const down = await harness(['cp', `env-cli:${local}`, join(work, 'no-such-dir', 'y.bin')], env);
    expect(down.code).toBe(1);
    expect(down.stderr).toMatch(/No such file|not found|ENOENT/i);
    // The connection's handles were all closed: a new copy over the same executor goes through.
    const again = await harness(['cp', local, `env-cli:${work}/fail-again.bin`], env);
    expect(again.code).toBe(0);
  });

  it('cat of a missing remote file fails with the OS reason', async () => {
    const result = await harness(['cat', `env-cli:${work}/does-not-exist`], env);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/No such file|not found|ENOENT/i);
  });
});

describe('harness config file', () => {
  it('is read strictly: an unknown key or a bad value is named, exit 2', async () => {
    const config = join(work, 'strict.toml');
    writeFileSync(config, 'current-context = "a"\n[contexts.a]\nregistri = "http://127.0.0.1:1"\n');
    const typo = await harness(['exec', '--', 'true'], { TETHER_CONFIG: config });
    expect(typo.code).toBe(2);
    expect(typo.stderr).toContain('unknown key "registri" in contexts.a');
    writeFileSync(config, 'current-context = 3\n');
    expect((await harness(['config', 'view'], { TETHER_CONFIG: config })).stderr).toContain(
      'current-context must be a string',
    );
    writeFileSync(config, '[contexts.a\n');
    expect((await harness(['config', 'get-contexts'], { TETHER_CONFIG: config })).stderr).toContain('not valid TOML');
    writeFileSync(config, '[contexts.a]\napi-key-file = "relative.key"\n');
    const relative = await harness(['exec', '--context', 'a', '--', 'true'], { TETHER_CONFIG: config });
    expect(relative.stderr).toContain('api-key-file must be an absolute path');
  });

  it('lives in $XDG_CONFIG_HOME/tether/config.toml, else ~/.config/tether/config.toml', async () => {
    const xdg = mkdtempSync(join(work, 'xdg-'));
    const home = mkdtempSync(join(work, 'home-'));
    expect(
      (
        await harness(['config', 'set-context', 'x', '--environment-id', 'e1'], {
          TETHER_CONFIG: '',
          XDG_CONFIG_HOME: xdg,
        })
      ).code,
    ).toBe(0);
    expect(statSync(join(xdg, 'tether', 'config.toml')).isFile()).toBe(true);
    expect(statSync(join(xdg, 'tether')).mode & 0o777).toBe(0o700);
    expect(
      (await harness(['config', 'set-context', 'y', '--environment-id', 'e1'], { TETHER_CONFIG: '', HOME: home })).code,
    ).toBe(0);
    expect(readFileSync(join(home, '.config', 'tether', 'config.toml'), 'utf8')).toContain('[contexts.y]');
  });

  it('set-context checks what it stores', async () => {
    const only = { TETHER_CONFIG: join(work, 'checked.toml') };
    const badName = await harness(['config', 'set-context', 'no spaces'], only);
    expect(badName.code).toBe(2);
    expect(badName.stderr).toContain('bad context name');
    const badUrl = await harness(['config', 'set-context', 'a', '--registry', 'ftp://x'], only);
    expect(badUrl.code).toBe(2);
    expect(badUrl.stderr).toContain('--registry must be http:// or https://');
    expect((await harness(['config', 'set-context', 'a', '--api-key-file', 'rel.key'], only)).code).toBe(0);
    expect((await harness(['config', 'view'], only)).stdout).toContain(
      `api-key-file = "${join(process.cwd(), 'rel.key')}"`,
    );
  });
});

describe('harness completion', () => {
  /** Runs the bash script's completion for `words` (the last one being completed); `harness` is stubbed. */
  function bashComplete(script: string, words: string[]): string[] {
    const file = join(work, 'completion.bash');
    writeFileSync(file, script);
    const program = [
      // The script asks the harness for context names: a stub answers.
      `harness() { printf 'dev\\nprod\\n'; }`,
      `source ${JSON.stringify(file)}`,
      `COMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${words.length - 1}`,
      '_harness',
      `printf '%s\\n' "\${COMPREPLY[@]}"`,
    ].join('\n');
    const result = spawnSync('bash', ['--norc', '-c', program], { encoding: 'utf8', cwd: work });
    expect(result.stderr).toBe('');
    return result.stdout.split('\n').filter(Boolean);
  }

  it('bash: commands, their options, subcommands and context names', async () => {
    const { stdout: script, code } = await harness(['completion', 'bash'], {});
    expect(code).toBe(0);
    expect(spawnSync('bash', ['-n'], { input: script }).status).toBe(0);
    expect(bashComplete(script, ['harness', 'sh']).sort()).toEqual(['share', 'shell']);
    expect(bashComplete(script, ['harness', 'she'])).toEqual(['shell']);
    expect(bashComplete(script, ['harness', 'co'])).toEqual(['config', 'completion']);
    expect(bashComplete(script, ['harness', 'exec', '--c']).sort()).toEqual(
      ['--clean-env', '--connect-timeout', '--context', '--cwd'].sort(),
    );
    expect(bashComplete(script, ['harness', 'exec', '--context', ''])).toEqual(['dev', 'prod']);
    expect(bashComplete(script, ['harness', 'config', 'use'])).toEqual(['use-context']);
    expect(bashComplete(script, ['harness', 'config', 'use-context', 'p'])).toEqual(['prod']);
    expect(bashComplete(script, ['harness', 'config', 'set-context', 'dev', '--api'])).toEqual(['--api-key-file']);
  });

  it('zsh and fish: every command and option, context names from get-contexts', async () => {
    const zsh = await harness(['completion', 'zsh'], {});
    expect(zsh.code).toBe(0);
    expect(zsh.stdout.startsWith('#compdef harness\n')).toBe(true);
    expect(zsh.stdout).toContain("'shell:open a login shell");
    expect(zsh.stdout).toContain("'(-t --tty)'{-t,--tty}'[run in a pseudo-terminal");
    expect(zsh.stdout).toContain("'--context[use this context");
    expect(zsh.stdout).toContain('harness config get-contexts -o name');
    const fish = await harness(['completion', 'fish'], {});
    expect(fish.stdout).toContain("complete -c harness -n '__fish_use_subcommand' -a shell -d 'open a login shell");
    expect(fish.stdout).toContain("complete -c harness -n '__fish_seen_subcommand_from exec' -s t -l tty");
    expect(fish.stdout).toContain("-l context -x -a '(harness config get-contexts -o name 2>/dev/null)'");
    const unknown = await harness(['completion', 'tcsh'], {});
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('choose bash, zsh, fish');
  });
});

describe('harness CLI straight to an executor (--url)', () => {
  it('runs and lists through the executor WebSocket, no registry involved', async () => {
    const peer = await startPeer({ kind: 'tether', transport: 'ws' });
    try {
      const run = await harness(['exec', '--url', peer.url!, '--cwd', work, '--', 'echo', 'direct'], {});
      expect(run).toEqual({ code: 0, stdout: 'direct\n', stderr: '' });
      // From its variable (or the older name) --url serves only commands without a location.
      for (const name of ['TETHER_HARNESS_URL', 'TETHER_EXECUTOR_URL']) {
        const fromEnv = await harness(['ls', `${'env-x'}:${work}`], { [name]: peer.url! });
        expect(fromEnv.code, name).toBe(2);
        expect(fromEnv.stderr).toContain('--registry');
      }
      expect(await harness(['exec', '--cwd', work, '--', 'echo', 'direct'], { TETHER_HARNESS_URL: peer.url! })).toEqual(
        {
          code: 0,
          stdout: 'direct\n',
          stderr: '',
        },
      );
      // Before the command as after it.
      expect(await harness(['--url', peer.url!, 'exec', '--cwd', work, '--', 'echo', 'before'], {})).toEqual({
        code: 0,
        stdout: 'before\n',
        stderr: '',
      });
    } finally {
      await peer.close();
    }
  });
});

describe('harness CLI connect timeout', () => {
  it('keeps trying an unreachable executor until --connect-timeout, then says why', async () => {
    // A port nothing listens on: every attempt is refused, which may pass, so it is retried.
    const { createServer } = await import('node:net');
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const port = (probe.address() as { port: number }).port;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const started = Date.now();
    const run = await harness(['exec', '--url', `ws://127.0.0.1:${port}`, '--connect-timeout', '1', '--', 'true'], {});
    expect(run.code).toBe(255);
    expect(run.stderr).toMatch(/could not connect within 1000 ms \(\d+ attempts\)/);
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    const bad = await harness(
      ['exec', '--url', `ws://127.0.0.1:${port}`, '--connect-timeout', 'soon', '--', 'true'],
      {},
    );
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('expected a duration such as 500ms, 30s, 5m or 1h (a bare number is seconds)');
    for (const name of ['TETHER_HARNESS_CONNECT_TIMEOUT', 'TETHER_CONNECT_TIMEOUT']) {
      const badEnv = await harness(['exec', '--url', `ws://127.0.0.1:${port}`, '--', 'true'], { [name]: '-1' });
      expect(badEnv.code).toBe(2);
      expect(badEnv.stderr).toContain(`from env '${name}' is invalid`);
    }
    const units = await harness(
      ['exec', '--url', `ws://127.0.0.1:${port}`, '--connect-timeout', '700ms', '--', 'true'],
      {},
    );
    expect(units.stderr).toMatch(/could not connect within 700 ms/);
  });
});
