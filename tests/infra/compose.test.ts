/**
 * The compose file and Dockerfile cannot be run here (no Docker engine), so they are checked offline: the
 * compose file parses, every build target exists in the Dockerfile, every command names a built entry point
 * and only flags and TETHER_* variables that entry point accepts (per its --help), and the services are wired
 * to each other consistently: the registry on PostgreSQL, two relay nodes each with its own URL and key, the
 * executor, and the observability profile's collector and Prometheus scraping every service. (.ci/run also
 * runs `docker-compose config` on both profiles.)
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import {
  appHelp,
  flagsIn,
  inlineTetherVariables,
  invocations,
  unknownFlags,
  unknownTetherVariables,
} from './app-cli.ts';

const root = repoRoot();

interface Service {
  image?: string;
  build?: { target?: string; dockerfile?: string };
  entrypoint?: string[];
  command?: string[];
  depends_on?: Record<string, { condition?: string }>;
  environment?: Record<string, string>;
  user?: string;
  profiles?: string[];
  networks?: string[];
  volumes?: string[];
  ports?: string[];
  healthcheck?: { test?: string[] };
}

const compose = parse(readFileSync(join(root, 'docker-compose.yml'), 'utf8'), { merge: true }) as {
  services: Record<string, Service>;
  networks?: Record<string, { internal?: boolean } | null>;
  volumes?: Record<string, unknown>;
};
const services = compose.services;
const dockerfile = readFileSync(join(root, 'infra', 'docker', 'Dockerfile'), 'utf8');
const targets = new Set([...dockerfile.matchAll(/^FROM\s+\S+\s+AS\s+(\S+)/gim)].map((m) => m[1]));

function service(name: string): Service {
  const found = services[name];
  if (!found) throw new Error(`docker-compose.yml has no service ${name}`);
  return found;
}

/** A service's entrypoint and command as one script text. */
function script(name: string): string {
  const { entrypoint = [], command = [] } = service(name);
  return [...entrypoint, ...command].join('\n');
}

/** The Dockerfile's instructions of one stage (FROM … AS name up to the next FROM). */
function stage(name: string): string {
  const start = dockerfile.search(new RegExp(`^FROM\\s+\\S+\\s+AS\\s+${name}\\s*$`, 'im'));
  if (start < 0) throw new Error(`no stage ${name}`);
  const rest = dockerfile.slice(start + 1);
  const next = rest.search(/^FROM\s/m);
  return dockerfile.slice(start, next < 0 ? undefined : start + 1 + next);
}

const RELAYS = ['relay-a', 'relay-b'];
const OBSERVABILITY = ['otel-collector', 'prometheus'];

describe('docker-compose.yml and infra/docker/Dockerfile', () => {
  it('builds only targets the Dockerfile defines', () => {
    for (const [name, definition] of Object.entries(services)) {
      if (!definition.build) continue;
      expect(definition.build.dockerfile, name).toBe('infra/docker/Dockerfile');
      expect(targets.has(definition.build.target ?? ''), `${name} → target ${definition.build.target}`).toBe(true);
    }
    for (const app of ['registry', 'relay', 'executor', 'harness']) expect(targets.has(app), app).toBe(true);
  });

  it('depends only on services that exist', () => {
    for (const [name, definition] of Object.entries(services)) {
      for (const dependency of Object.keys(definition.depends_on ?? {})) {
        expect(Object.keys(services), `${name} depends on ${dependency}`).toContain(dependency);
      }
    }
  });

  it('runs built entry points with flags and TETHER_* variables they accept (per their --help)', () => {
    let checked = 0;
    for (const name of Object.keys(services)) {
      const used = invocations(script(name));
      for (const invocation of used) {
        expect(existsSync(join(root, 'apps', invocation.app, 'dist', 'main.js')), `${name}: ${invocation.app}`).toBe(
          true,
        );
        expect(unknownFlags(invocation), `${name}: ${invocation.app} ${invocation.subcommand.join(' ')}`).toEqual([]);
        checked++;
      }
      const variables = [...Object.keys(service(name).environment ?? {}), ...inlineTetherVariables(script(name))];
      expect(unknownTetherVariables(variables, used), `${name}: TETHER_* variables`).toEqual([]);
    }
    expect(checked).toBeGreaterThanOrEqual(6);
    // The keys a bootstrap creates: `create NAME ROLE FLAG VALUE` passes FLAG to `registry keys create`.
    const accepted = flagsIn(appHelp('registry', ['keys', 'create']));
    const creates = [...script('keys').matchAll(/^\s*create \S+ \S+ (--\S+) \S+$/gm)].map((m) => m[1] as string);
    expect(creates).toHaveLength(4);
    for (const flag of creates) expect(accepted.has(flag), flag).toBe(true);
  });

  it('runs the registry on PostgreSQL, reachable only from the registry and the key bootstrap', () => {
    const postgres = service('postgres');
    expect(postgres.image).toBe('postgres:17');
    expect(postgres.healthcheck?.test).toContain('pg_isready');
    expect(postgres.networks).toEqual(['database']);
    expect(compose.networks?.database?.internal).toBe(true);
    const onDatabase = Object.entries(services)
      .filter(([, definition]) => definition.networks?.includes('database'))
      .map(([name]) => name)
      .sort();
    expect(onDatabase).toEqual(['keys', 'postgres', 'registry']);
    expect(service('keys').depends_on?.postgres?.condition).toBe('service_healthy');
    expect(service('registry').depends_on?.keys?.condition).toBe('service_completed_successfully');
    // The password: generated on first start into its own volume, never written in the compose file, and
    // handed to the registry in its environment (a command line shows in `ps`).
    expect(script('postgres')).toContain('/dev/urandom');
    expect(postgres.environment?.POSTGRES_PASSWORD_FILE).toBe('/run/tether-db/password');
    expect(postgres.environment?.POSTGRES_PASSWORD).toBeUndefined();
    const database =
      'TETHER_REGISTRY_DATABASE="postgres://tether:$$(cat /run/tether-db/password)@postgres:5432/tether"';
    expect(script('registry')).toContain(database);
    expect(script('keys')).toContain(`export ${database}`);
    for (const name of ['registry', 'keys']) {
      expect(invocations(script(name)).flatMap((i) => i.args)).not.toContain('--database');
    }
    const passwordMounts = Object.entries(services)
      .filter(([, definition]) => (definition.volumes ?? []).some((v) => v.startsWith('postgres-password:')))
      .map(([name]) => name)
      .sort();
    expect(passwordMounts).toEqual(['keys', 'postgres', 'registry']);
  });

  it('runs two relay nodes, each announcing its own URL, listed by the registry, with a key bound to it', () => {
    const registry = invocations(script('registry'))[0];
    const listed = (registry?.args ?? []).flatMap((arg, i, args) => (args[i - 1] === '--relay-url' ? [arg] : []));
    expect(listed).toEqual(RELAYS.map((relay) => `ws://${relay}:8081`));
    for (const relay of RELAYS) {
      const url = `ws://${relay}:8081`;
      const [run] = invocations(script(relay));
      expect(run?.args[(run?.args.indexOf('--public-url') ?? 0) + 1], relay).toBe(url);
      expect(run?.args).toContain('--registry');
      expect(run?.args[(run?.args.indexOf('--registry') ?? 0) + 1]).toBe('http://registry:8080');
      expect(script('keys')).toContain(`create ${relay} relay --relay-url ${url}`);
      expect(script(relay)).toContain(`TETHER_RELAY_REGISTRY_TOKEN="$$(cat /keys/${relay}/${relay}.key)"`);
      expect(service(relay).depends_on?.registry?.condition).toBe('service_healthy');
      expect(service('executor').depends_on?.[relay]?.condition).toBe('service_healthy');
    }
    // Host ports differ (each relay listens on 8081 in its own container).
    const hostPorts = RELAYS.map((relay) => service(relay).ports?.[0]?.split(':')[1]);
    expect(new Set(hostPorts).size).toBe(RELAYS.length);
  });

  it('wires the executor and harness to the registry by its service name', () => {
    const text = JSON.stringify(services);
    expect(text).toContain('--registry http://registry:8080');
    expect(service('harness').environment?.TETHER_HARNESS_REGISTRY).toBe('http://registry:8080');
  });

  it('mounts each API key only into the service that uses it', () => {
    const mounts = (name: string) => (service(name).volumes ?? []).filter((v) => v.includes('-key:'));
    for (const relay of RELAYS) expect(mounts(relay)).toEqual([`${relay}-key:/keys/${relay}:ro`]);
    expect(mounts('executor')).toEqual(['executor-key:/keys/executor:ro']);
    expect(mounts('harness')).toEqual(['harness-key:/keys/harness:ro']);
    expect(mounts('registry')).toEqual([]);
    for (const name of OBSERVABILITY) expect(mounts(name)).toEqual([]);
  });

  it('gives each service the least key it needs: relay-role keys for the relays, one-environment keys, no admin key', () => {
    const keys = script('keys');
    expect(keys).toContain('create executor executor --environments local');
    expect(keys).toContain('create harness harness --environments local');
    expect(keys).not.toMatch(/create \S+ admin|'\*'/);
    // The executor gets its key on fd 3, opened by root before setpriv drops to `node`; the file is root-only
    // (0400), so neither the executor's user nor a harness's command can read it, and no environment holds it.
    const executor = script('executor');
    expect(executor).toContain('exec setpriv --reuid=node --regid=node --init-groups --');
    expect(executor).toContain('--api-key-fd 3');
    expect(executor).toContain('3< /keys/executor/executor.key');
    expect(executor).not.toMatch(/_API_KEY\b/);
    expect(service('executor').user).toBe('root');
    expect(service('keys').user).toBe('root');
    expect(keys).toContain('chown root:root /keys/executor/executor.key');
    expect(keys).toContain('chmod 400 /keys/executor/executor.key');
    // What root created must stay usable by the services that run as `node`.
    expect(keys).toContain(
      'chown node:node /keys/relay-a/relay-a.key /keys/relay-b/relay-b.key /keys/harness/harness.key',
    );
    expect(keys).toContain('chown -R node:node /data');
  });

  it('creates in the image every /keys mount point compose uses, so the volumes start with their owner', () => {
    const made = /RUN mkdir -p ([^&\\]+)/.exec(dockerfile)?.[1]?.trim().split(/\s+/) ?? [];
    const used = Object.values(services)
      .flatMap((definition) => definition.volumes ?? [])
      .map((volume) => volume.split(':')[1] as string)
      .filter((path) => path.startsWith('/keys/'));
    expect(used.length).toBeGreaterThan(0);
    for (const path of used) expect(made, path).toContain(path);
  });

  it('allows the plain-http registry only explicitly, for the compose network (refused off loopback otherwise)', () => {
    const executor = script('executor');
    expect(executor).toContain('--registry http://registry:8080');
    expect(executor).toContain('--allow-insecure-registry');
    // The executor's listener (an exec-server socket: no credentials) stays on loopback.
    expect(executor).toContain('--listen ws://127.0.0.1:8765');
    const harness = service('harness').environment;
    expect(harness?.TETHER_HARNESS_REGISTRY).toBe('http://registry:8080');
    expect(harness?.TETHER_HARNESS_ALLOW_INSECURE_REGISTRY).toBe('1');
  });

  it('starts the collector and Prometheus only under the observability profile', () => {
    for (const [name, definition] of Object.entries(services)) {
      if (OBSERVABILITY.includes(name)) expect(definition.profiles, name).toEqual(['observability']);
      else expect(definition.profiles ?? [], name).not.toContain('observability');
    }
    expect(service('otel-collector').image).toMatch(/^otel\/opentelemetry-collector-contrib:\d+\.\d+\.\d+$/);
    expect(service('prometheus').image).toMatch(/^prom\/prometheus:v\d+\.\d+\.\d+$/);
    // Every file a service mounts from the repository exists.
    for (const [name, definition] of Object.entries(services)) {
      for (const volume of definition.volumes ?? []) {
        if (!volume.startsWith('./')) continue;
        expect(existsSync(join(root, volume.split(':')[0] as string)), `${name}: ${volume}`).toBe(true);
      }
    }
    // The services export OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is given to compose, and to the collector's
    // OTLP/HTTP port when the comment's command is followed.
    for (const name of ['registry', ...RELAYS, 'executor']) {
      // Compose's own interpolation: the value given to compose, else empty (unset, for OpenTelemetry).
      expect(service(name).environment?.OTEL_EXPORTER_OTLP_ENDPOINT, name).toBe(`$\{OTEL_EXPORTER_OTLP_ENDPOINT:-}`);
    }
    expect(readFileSync(join(root, 'docker-compose.yml'), 'utf8')).toContain(
      'OTEL_EXPORTER_OTLP_ENDPOINT=http://otel-collector:4318 docker compose --profile observability up',
    );
  });

  it('has a collector config with an OTLP receiver whose metrics reach a Prometheus endpoint', () => {
    const mount = (service('otel-collector').volumes ?? [])[0] as string;
    const [file, target] = mount.split(':') as [string, string];
    expect(service('otel-collector').command).toEqual([`--config=${target}`]);
    const config = parse(readFileSync(join(root, file), 'utf8')) as {
      receivers: Record<string, { protocols?: Record<string, { endpoint?: string }> }>;
      processors?: Record<string, unknown>;
      exporters: Record<string, { endpoint?: string }>;
      extensions?: Record<string, unknown>;
      service: { extensions?: string[]; pipelines: Record<string, Record<string, string[]>> };
    };
    expect(config.receivers.otlp?.protocols?.http?.endpoint).toBe('0.0.0.0:4318');
    expect(config.receivers.otlp?.protocols?.grpc?.endpoint).toBe('0.0.0.0:4317');
    for (const [pipeline, parts] of Object.entries(config.service.pipelines)) {
      for (const [section, names] of [
        ['receivers', parts.receivers],
        ['processors', parts.processors ?? []],
        ['exporters', parts.exporters],
      ] as const) {
        expect(names?.length, `${pipeline} ${section}`).toBeGreaterThan(section === 'processors' ? -1 : 0);
        for (const component of names ?? []) {
          expect(Object.keys(config[section] ?? {}), `${pipeline}: ${section} ${component}`).toContain(component);
        }
      }
    }
    for (const extension of config.service.extensions ?? [])
      expect(Object.keys(config.extensions ?? {})).toContain(extension);
    expect(config.service.pipelines.metrics?.receivers).toContain('otlp');
    expect(config.service.pipelines.metrics?.exporters).toContain('prometheus');
    expect(config.exporters.prometheus?.endpoint).toBe('0.0.0.0:8889');
  });

  it("has Prometheus scrape every service's metrics: registry and relays directly, the executor's through the collector", () => {
    const mount = (service('prometheus').volumes ?? []).find((v) => v.startsWith('./')) as string;
    const [file, target] = mount.split(':') as [string, string];
    expect(service('prometheus').command).toContain(`--config.file=${target}`);
    const config = parse(readFileSync(join(root, file), 'utf8')) as {
      scrape_configs: Array<{ job_name: string; metrics_path?: string; static_configs: Array<{ targets: string[] }> }>;
    };
    const jobs = new Map(
      config.scrape_configs.map((job) => [job.job_name, job.static_configs.flatMap((c) => c.targets).sort()]),
    );
    for (const job of config.scrape_configs) expect(job.metrics_path ?? '/metrics').toBe('/metrics');
    // Each registry and relay: the port its --listen binds, on its service name.
    const port = (name: string) => {
      const args = invocations(script(name))[0]?.args ?? [];
      return (args[args.indexOf('--listen') + 1] as string).split(':')[1];
    };
    expect(jobs.get('registry')).toEqual([`registry:${port('registry')}`]);
    expect(jobs.get('relay')).toEqual(RELAYS.map((relay) => `${relay}:${port(relay)}`));
    expect(jobs.get('executor')).toEqual(['otel-collector:8889']);
  });

  it('builds each image from Node 24 with only its app, deployed by pnpm with production dependencies', () => {
    expect(dockerfile).toMatch(/^ARG NODE_IMAGE=node:24[.\w-]*$/m);
    expect(dockerfile).toContain('ENV npm_config_inject_workspace_packages=true');
    for (const app of ['registry', 'relay', 'executor', 'harness']) {
      expect(stage(`${app}-deploy`)).toContain(`RUN pnpm deploy --filter @tether/${app} --prod --offline /out/${app}`);
      const runtime = stage(app);
      expect(runtime).toMatch(/^FROM runtime AS/);
      // Only its own deploy output is copied in; the build stage (all apps, dev dependencies) never is.
      const copies = [...runtime.matchAll(/^COPY\s+(.*)$/gm)].map((m) => m[1]);
      expect(copies).toEqual([`--from=${app}-deploy /out/${app} /app/apps/${app}`]);
      // The stage ends as the unprivileged user.
      const users = [...`${stage('runtime')}\n${runtime}`.matchAll(/^USER\s+(\S+)/gm)].map((m) => m[1]);
      expect(users.at(-1), app).toBe('node');
    }
    expect(stage('runtime')).not.toMatch(/^COPY/m);
  });

  it('copies only what exists, never the local state or a key, and bakes no secret into an image', () => {
    const ignore = readFileSync(join(root, '.dockerignore'), 'utf8').split('\n');
    for (const entry of ['**/node_modules', '**/dist', 'data', '.git', '**/*.key', '**/*.pem', '**/.env*']) {
      expect(ignore, entry).toContain(entry);
    }
    for (const match of dockerfile.matchAll(/^COPY\s+(?!--from)(.+)$/gm)) {
      const sources = (match[1] as string).split(/\s+/).slice(0, -1);
      for (const source of sources) {
        expect(source, 'no key material').not.toMatch(/\.key$|\.pem$|keys?\/|secret/i);
        if (source === '.') continue;
        expect(existsSync(join(root, source)), `COPY ${source}`).toBe(true);
      }
    }
    expect(dockerfile).not.toMatch(/^(ENV|ARG)\s+\S*(KEY|TOKEN|PASSWORD|SECRET)/im);
  });
});
