/**
 * The OpenSSH side of the whole-command benchmarks (cp.ts, path.ts): a throwaway `sshd` on loopback with its
 * own host key and one authorized client key, and, for commands run over ssh, a ControlMaster connection
 * started once and shared by every later `ssh` as a user sets it up in ~/.ssh/config, so that what is timed
 * is the command and not a key exchange per command.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePort } from '@tether/test-kit';

export interface Sshd {
  readonly port: number;
  readonly user: string;
  readonly pid: number;
  /** The authorized client key (private half). */
  readonly clientKey: string;
  /** `scp`'s options for this server: the client key, no host-key prompt, batch mode, `-P port`. */
  readonly scpArgs: string[];
  close(): Promise<void>;
}

/** Options every ssh/scp to the throwaway server takes: its key, no known_hosts, no prompts, errors only. */
function clientOptions(clientKey: string): string[] {
  return [
    '-i',
    clientKey,
    '-o',
    'StrictHostKeyChecking=no',
    '-o',
    'UserKnownHostsFile=/dev/null',
    '-o',
    'LogLevel=ERROR',
    '-o',
    'BatchMode=yes',
  ];
}

/** The sshd binary, or null without one (Debian: openssh-server). */
export function sshdPath(): string | null {
  return ['/usr/sbin/sshd', '/usr/bin/sshd'].find((path) => existsSync(path)) ?? null;
}

/**
 * A throwaway sshd on loopback (keys and config in `dir`), ready when a connection succeeds; null without
 * an sshd binary. `extraConfig` lines are appended to its sshd_config.
 */
export async function startSshd(dir: string, extraConfig: string[] = []): Promise<Sshd | null> {
  const sshd = sshdPath();
  if (!sshd) return null;
  const hostKey = join(dir, 'host_ed25519');
  const clientKey = join(dir, 'client_ed25519');
  for (const key of [hostKey, clientKey]) {
    spawnSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', key], { stdio: 'ignore' });
  }
  writeFileSync(join(dir, 'authorized_keys'), readFileSync(`${clientKey}.pub`, 'utf8'), { mode: 0o600 });
  mkdirSync('/run/sshd', { recursive: true, mode: 0o755 });
  const port = await freePort();
  const config = join(dir, 'sshd_config');
  writeFileSync(
    config,
    [
      `Port ${port}`,
      'ListenAddress 127.0.0.1',
      `HostKey ${hostKey}`,
      `AuthorizedKeysFile ${join(dir, 'authorized_keys')}`,
      `PidFile ${join(dir, 'sshd.pid')}`,
      'PasswordAuthentication no',
      'KbdInteractiveAuthentication no',
      'UsePAM no',
      'StrictModes no',
      'PermitRootLogin yes',
      'Subsystem sftp internal-sftp',
      ...extraConfig,
    ].join('\n'),
  );
  const child = spawn(sshd, ['-D', '-e', '-f', config], { stdio: ['ignore', 'ignore', 'pipe'] });
  const user = process.env.USER ?? 'root';
  const options = clientOptions(clientKey);
  for (let attempt = 0; attempt < 50; attempt++) {
    const probe = spawnSync('ssh', [...options, '-p', String(port), `${user}@127.0.0.1`, 'true'], { stdio: 'ignore' });
    if (probe.status === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return {
    port,
    user,
    pid: child.pid ?? -1,
    clientKey,
    scpArgs: [...options, '-P', String(port)],
    close: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      await new Promise((resolve) => child.once('exit', resolve));
    },
  };
}

export interface SshMaster {
  /** The Host alias in `configFile`: `ssh -F <configFile> <host> CMD` is what a user types as `ssh host CMD`. */
  readonly host: string;
  readonly configFile: string;
  /** `ssh -F <configFile> <host>`, quoted for `sh -c`. */
  readonly command: string;
  /** What the client and server agreed on (`kex: client->server cipher: …` in `ssh -v`), e.g. chacha20-poly1305@openssh.com. */
  readonly cipher: string;
  /** The master's pid (it holds the connection and does the client side's crypto for every session). */
  readonly pid: number;
  close(): Promise<void>;
}

/**
 * Writes an ssh_config with a Host entry for `sshd` that multiplexes (ControlMaster=auto, ControlPath in
 * `dir`, ControlPersist) and starts the master. `ciphers`, if given, goes into the entry as `Ciphers`;
 * otherwise ssh negotiates its default, as a user who never set one gets.
 */
export async function startSshMaster(sshd: Sshd, dir: string, ciphers?: string): Promise<SshMaster> {
  const host = 'bench';
  const configFile = join(dir, 'ssh_config');
  writeFileSync(
    configFile,
    [
      `Host ${host}`,
      '  HostName 127.0.0.1',
      `  Port ${sshd.port}`,
      `  User ${sshd.user}`,
      `  IdentityFile ${sshd.clientKey}`,
      '  StrictHostKeyChecking no',
      '  UserKnownHostsFile /dev/null',
      '  LogLevel ERROR',
      '  BatchMode yes',
      '  ControlMaster auto',
      `  ControlPath ${join(dir, 'cm-%C')}`,
      '  ControlPersist 10m',
      ...(ciphers ? [`  Ciphers ${ciphers}`] : []),
      '',
    ].join('\n'),
  );
  // The negotiated cipher, from a verbose one-off connection with the same settings (not multiplexed, so the
  // master itself stays quiet).
  const probe = spawnSync(
    'ssh',
    ['-v', '-F', configFile, '-o', 'ControlMaster=no', '-o', 'ControlPath=none', host, 'true'],
    {
      encoding: 'utf8',
    },
  );
  const cipher = /kex: client->server cipher: (\S+)/.exec(probe.stderr)?.[1] ?? 'unknown';
  // -f -N: authenticate, then serve multiplexed sessions in the background until `-O exit`.
  const started = spawnSync('ssh', ['-F', configFile, '-o', 'ControlMaster=yes', '-f', '-N', host], {
    encoding: 'utf8',
  });
  if (started.status !== 0) throw new Error(`ssh master did not start: ${started.stderr}`);
  const check = spawnSync('ssh', ['-F', configFile, '-O', 'check', host], { encoding: 'utf8' });
  const pid = Number(/pid=(\d+)/.exec(check.stderr)?.[1] ?? -1);
  if (pid < 0) throw new Error(`ssh master not running: ${check.stderr}`);
  return {
    host,
    configFile,
    command: `ssh -F '${configFile}' ${host}`,
    cipher,
    pid,
    close: async () => {
      spawnSync('ssh', ['-F', configFile, '-O', 'exit', host], { stdio: 'ignore' });
    },
  };
}
