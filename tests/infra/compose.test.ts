/**
 * The compose file and Dockerfile cannot be run here (no Docker engine), so they are checked offline: the
 * compose file parses, every build target exists in the Dockerfile, every command names a built entry point
 * and only flags that entry point accepts, and the services are wired to each other consistently.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';

const root = repoRoot();
const compose = parse(readFileSync(join(root, 'docker-compose.yml'), 'utf8'), { merge: true }) as {
  services: Record<
    string,
    {
      build?: { target?: string; dockerfile?: string };
      entrypoint?: string[];
      command?: string[];
      depends_on?: Record<string, unknown>;
      environment?: Record<string, string>;
      user?: string;
    }
  >;
};
const dockerfile = readFileSync(join(root, 'infra', 'docker', 'Dockerfile'), 'utf8');
const targets = new Set([...dockerfile.matchAll(/^FROM\s+\S+\s+AS\s+(\S+)/gim)].map((m) => m[1]));

/** Every `node apps/X/dist/main.js ARGS…` invocation in a service (entrypoint scripts included). */
function invocations(service: { entrypoint?: string[]; command?: string[] }): Array<{ app: string; args: string[] }> {
  const text = [...(service.entrypoint ?? []), ...(service.command ?? [])].join(' ').replace(/\\\n/g, ' ');
  return [...text.matchAll(/node apps\/(\w+)\/dist\/main\.js((?:\s+(?:[\w:./=-]+|"\$\$@"))*)/g)].map((m) => ({
    app: m[1] as string,
    args: (m[2] ?? '').trim().split(/\s+/).filter(Boolean),
  }));
}

function help(app: string, args: string[]): string {
  const run = spawnSync(process.execPath, [join(root, 'apps', app, 'dist', 'main.js'), ...args, '--help'], {
    encoding: 'utf8',
  });
  return `${run.stdout}${run.stderr}`;
}

describe('docker-compose.yml and infra/docker/Dockerfile', () => {
  it('builds only targets the Dockerfile defines', () => {
    for (const [name, service] of Object.entries(compose.services)) {
      if (!service.build) continue;
      expect(service.build.dockerfile, name).toBe('infra/docker/Dockerfile');
      expect(targets.has(service.build.target ?? ''), `${name} → target ${service.build.target}`).toBe(true);
    }
    for (const app of ['registry', 'relay', 'executor', 'harness']) expect(targets.has(app), app).toBe(true);
  });

  it('depends only on services that exist', () => {
    for (const [name, service] of Object.entries(compose.services)) {
      for (const dependency of Object.keys(service.depends_on ?? {})) {
        expect(Object.keys(compose.services), `${name} depends on ${dependency}`).toContain(dependency);
      }
    }
  });

  it('runs built entry points with flags they accept', () => {
    let checked = 0;
    for (const [name, service] of Object.entries(compose.services)) {
      for (const { app, args } of invocations(service)) {
        expect(existsSync(join(root, 'apps', app, 'dist', 'main.js')), `${name}: apps/${app}/dist/main.js`).toBe(true);
        const subcommand =
          args[0] && !args[0].startsWith('-') && args[0] !== '"$$@"'
            ? [args[0], ...(args[1] && !args[1].startsWith('-') ? [args[1]] : [])]
            : [];
        const text = help(app, subcommand);
        for (const flag of args.filter((a) => a.startsWith('--'))) {
          expect(text, `${name}: ${app} ${subcommand.join(' ')} accepts ${flag}`).toContain(flag.split('=')[0]);
        }
        checked++;
      }
    }
    expect(checked).toBeGreaterThanOrEqual(5);
  });

  it('wires the registry, relay and executor to each other', () => {
    const text = JSON.stringify(compose.services);
    // The registry routes to the relay by the URL the relay announces.
    expect(text).toContain('--relay-url');
    expect(text).toContain('ws://relay:8081');
    expect(text).toContain('--public-url ws://relay:8081');
    // The executor and harness reach the registry by its service name.
    expect(text).toContain('--remote http://registry:8080');
    expect(text).toContain('TETHER_REGISTRY_URL');
  });

  it('mounts each API key only into the service that uses it', () => {
    const mounts = (name: string) =>
      ((compose.services[name] as { volumes?: string[] }).volumes ?? []).filter((v) => v.includes('-key:'));
    expect(mounts('relay')).toEqual(['relay-key:/keys/relay:ro']);
    expect(mounts('executor')).toEqual(['executor-key:/keys/executor:ro']);
    expect(mounts('harness')).toEqual(['harness-key:/keys/harness:ro']);
    expect(mounts('registry')).toEqual([]);
  });

  it('gives each service the least key it needs: a relay-role key for the relay, one-environment keys, no admin key', () => {
    const keys = (compose.services.keys?.entrypoint ?? []).join('\n');
    expect(keys).toContain('create relay --relay-url ws://relay:8081');
    expect(keys).toContain('create executor --environments local');
    expect(keys).toContain('create harness --environments local');
    expect(keys).not.toMatch(/create admin|'\*'/);
    const relay = (compose.services.relay?.entrypoint ?? []).join('\n');
    expect(relay).toContain('TETHER_RELAY_REGISTRY_TOKEN="$$(cat /keys/relay/relay.key)"');
    expect(relay).toContain('--public-url ws://relay:8081');
    // The executor gets its key on fd 3, opened by root before setpriv drops to `node`; the file is root-only
    // (0400), so neither the executor's user nor a harness's command can read it, and no environment holds it.
    const executor = (compose.services.executor?.entrypoint ?? []).join('\n');
    expect(executor).toContain('exec setpriv --reuid=node --regid=node --init-groups --');
    expect(executor).toContain('--api-key-fd 3');
    expect(executor).toContain('3< /keys/executor/executor.key');
    expect(executor).not.toContain('TETHER_API_KEY');
    expect(compose.services.executor?.user).toBe('root');
    expect(compose.services.keys?.user).toBe('root');
    expect(keys).toContain('chown root:root /keys/executor/executor.key');
    expect(keys).toContain('chmod 400 /keys/executor/executor.key');
    // What root created must stay usable by the services that run as `node`.
    expect(keys).toContain('chown node:node /keys/relay/relay.key /keys/harness/harness.key');
    expect(keys).toContain('chown -R node:node /data');
  });

  it('creates in the image every /keys mount point compose uses, so the volumes start with their owner', () => {
    const made = /RUN mkdir -p ([^&]+)&&/.exec(dockerfile)?.[1]?.trim().split(/\s+/) ?? [];
    const used = Object.values(compose.services)
      .flatMap((service) => (service as { volumes?: string[] }).volumes ?? [])
      .map((volume) => volume.split(':')[1] as string)
      .filter((path) => path.startsWith('/keys/'));
    expect(used.length).toBeGreaterThan(0);
    for (const path of used) expect(made, path).toContain(path);
  });

  it('allows the plain-http registry only explicitly, for the compose network (refused off loopback otherwise)', () => {
    const executor = (compose.services.executor?.entrypoint ?? []).join('\n');
    expect(executor).toContain('--remote http://registry:8080');
    expect(executor).toContain('--allow-insecure-registry');
    const harness = compose.services.harness?.environment;
    expect(harness?.TETHER_REGISTRY_URL).toBe('http://registry:8080');
    expect(harness?.TETHER_ALLOW_INSECURE_REGISTRY).toBe('1');
  });

  it('copies only what exists and never the local state', () => {
    const ignore = readFileSync(join(root, '.dockerignore'), 'utf8');
    for (const entry of ['**/node_modules', '**/dist', 'data', '.git']) expect(ignore).toContain(entry);
    for (const match of dockerfile.matchAll(/^COPY\s+(?!--from)(\S+)/gm)) {
      const source = match[1] as string;
      if (source === '.') continue;
      expect(existsSync(join(root, source)), `COPY ${source}`).toBe(true);
    }
  });
});
