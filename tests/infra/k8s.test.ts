/**
 * infra/k8s offline: the base and every overlay are built as kustomize would (tests/infra/kustomize.ts),
 * each object is validated against the Kubernetes API schemas (kubernetes-models) and its field names against
 * the API's (k8s-fields.ts), and each container's
 * command line and TETHER_* variables are held against what the real built app accepts (its --help). Then
 * what the manifests promise: probes on /livez and /readyz, non-root and no capabilities everywhere, keys
 * only from Secrets (none committed), one image per app, the relay URLs the registry lists equal to the ones
 * the relay pods announce, and NetworkPolicies that open the relay, guard the registry and PostgreSQL and
 * close the executors.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { repoRoot } from '@tether/test-kit';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  appHelp,
  type Invocation,
  inlineTetherVariables,
  invocations,
  unknownFlags,
  unknownTetherVariables,
} from './app-cli.ts';
import { unknownFields } from './k8s-fields.ts';
import { build, containersOf, type K8sObject, podSpecOf, readKustomization, splitImage } from './kustomize.ts';

const root = repoRoot();
const k8s = join(root, 'infra', 'k8s');
const overlays = readdirSync(join(k8s, 'overlays')).map((name) => join(k8s, 'overlays', name));
const builds = [join(k8s, 'base'), ...overlays].map((dir) => {
  const files = new Set<string>();
  return { name: relative(root, dir), objects: build(dir, files), files };
});
const TETHER_APPS = ['registry', 'relay', 'executor'];

// biome-ignore lint/suspicious/noExplicitAny: containers as written in the manifests.
type Container = any;

interface Workload {
  build: string;
  object: K8sObject;
  // biome-ignore lint/suspicious/noExplicitAny: a pod spec as written in the manifest.
  pod: any;
}

function workloads(): Workload[] {
  return builds.flatMap(({ name, objects }) =>
    objects.flatMap((object) => {
      const pod = podSpecOf(object);
      return pod ? [{ build: name, object, pod }] : [];
    }),
  );
}

function find(objects: K8sObject[], kind: string, name: string): K8sObject {
  const found = objects.find((object) => object.kind === kind && object.metadata.name === name);
  if (!found) throw new Error(`no ${kind} ${name}`);
  return found;
}

/**
 * A container's command line as Kubernetes runs it in pod `podName`: $(VAR) expanded from its env (values,
 * ConfigMap keys, the pod name), `$$` unescaped. Secret values stay `<secret>`.
 */
function commandLine(objects: K8sObject[], container: Container, podName: string): string {
  const env = new Map<string, string>();
  for (const variable of container.env ?? []) {
    const from = variable.valueFrom;
    if (variable.value !== undefined) env.set(variable.name, String(variable.value));
    else if (from?.fieldRef?.fieldPath === 'metadata.name') env.set(variable.name, podName);
    else if (from?.configMapKeyRef) {
      const { name, key, optional } = from.configMapKeyRef;
      const map = objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === name);
      // An optional reference to a ConfigMap that is not there leaves the variable unset.
      if (map || !optional) env.set(variable.name, String(find(objects, 'ConfigMap', name).data?.[key]));
    } else if (from?.secretKeyRef) env.set(variable.name, '<secret>');
  }
  const words: string[] = [...(container.command ?? []), ...(container.args ?? [])];
  return words
    .join(' ')
    .replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (whole, name: string | undefined) =>
      name === undefined ? '$' : (env.get(name) ?? whole),
    );
}

/** The app a container runs, from its command line; the image must be that app's. */
function invocationsOf(objects: K8sObject[], container: Container, podName: string): Invocation[] {
  return invocations(commandLine(objects, container, podName));
}

function isTetherImage(image: string): string | undefined {
  const { name } = splitImage(image);
  return TETHER_APPS.find((app) => name === `tether/${app}` || name.endsWith(`/tether/${app}`));
}

function probePath(probe: Container): string | undefined {
  if (probe?.httpGet) return probe.httpGet.path;
  const command = (probe?.exec?.command ?? []).join(' ');
  return /http:\/\/127\.0\.0\.1:\d+(\/[a-z]+)/.exec(command)?.[1];
}

describe('infra/k8s', () => {
  let models: Map<string, new (data: unknown) => { validate(): void }>;

  beforeAll(async () => {
    models = new Map();
    for (const { objects } of builds) {
      for (const { apiVersion, kind } of objects) {
        const key = `${apiVersion}/${kind}`;
        if (models.has(key)) continue;
        const module = (await import(`kubernetes-models/${apiVersion}/${kind}`)) as Record<string, unknown>;
        models.set(key, module[kind] as new (data: unknown) => { validate(): void });
      }
    }
  });

  it('builds the base and every overlay, from every manifest under infra/k8s', () => {
    expect(builds.map((b) => b.name)).toContain('infra/k8s/base');
    expect(overlays.length).toBeGreaterThanOrEqual(1);
    const used = new Set(builds.flatMap((b) => [...b.files]));
    const yaml = (dir: string): string[] =>
      readdirSync(dir).flatMap((entry) => {
        const path = join(dir, entry);
        return statSync(path).isDirectory() ? yaml(path) : /\.ya?ml$/.test(entry) ? [path] : [];
      });
    for (const file of yaml(k8s)) expect(used.has(file), `${relative(root, file)} is in no kustomization`).toBe(true);
    for (const { name, objects } of builds) {
      const kinds = objects.map((o) => o.kind);
      for (const kind of ['Deployment', 'StatefulSet', 'Service', 'NetworkPolicy', 'ConfigMap']) {
        expect(kinds, `${name} has a ${kind}`).toContain(kind);
      }
      const ids = objects.map((o) => `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`);
      expect(new Set(ids).size, `${name}: duplicate objects`).toBe(ids.length);
    }
  });

  it('validates every object against the Kubernetes API schemas (kubernetes-models)', () => {
    let validated = 0;
    for (const { name, objects } of builds) {
      for (const object of objects) {
        const Model = models.get(`${object.apiVersion}/${object.kind}`);
        expect(Model, `${name}: ${object.apiVersion} ${object.kind}`).toBeDefined();
        const model = new (Model as NonNullable<typeof Model>)(object);
        expect(() => model.validate(), `${name}: ${object.kind} ${object.metadata.name}`).not.toThrow();
        // The schemas allow extra properties (the API server drops them): a misspelt field is found here.
        expect(unknownFields(object), `${name}: ${object.kind} ${object.metadata.name}`).toEqual([]);
        validated++;
      }
    }
    expect(validated).toBeGreaterThanOrEqual(20);
    // The validator is live: a wrong type is refused.
    const service = find(builds[0]?.objects ?? [], 'Service', 'registry');
    const Service = models.get('v1/Service') as NonNullable<ReturnType<typeof models.get>>;
    const broken = structuredClone(service);
    broken.spec.ports[0].port = 'eighty';
    expect(() => new Service(broken).validate()).toThrow(/port/);
    const misspelt = structuredClone(find(builds[0]?.objects ?? [], 'StatefulSet', 'relay'));
    misspelt.spec.template.spec.containers[0].readinesProbe = misspelt.spec.template.spec.containers[0].readinessProbe;
    expect(unknownFields(misspelt)).toEqual(['StatefulSet.spec.template.spec.containers[0].readinesProbe']);
  });

  it('wires selectors, Services and ports to the pods that exist', () => {
    for (const { name, objects } of builds) {
      const pods = objects.flatMap((object) => {
        const pod = podSpecOf(object);
        return pod ? [{ labels: object.spec.template.metadata.labels as Record<string, string>, pod }] : [];
      });
      const matches = (selector: Record<string, string>, labels: Record<string, string>) =>
        Object.entries(selector).every(([key, value]) => labels[key] === value);
      for (const object of objects) {
        if (object.kind === 'Deployment' || object.kind === 'StatefulSet') {
          expect(
            matches(object.spec.selector.matchLabels, object.spec.template.metadata.labels),
            object.metadata.name,
          ).toBe(true);
        }
        if (object.kind === 'Service') {
          const selector = { ...object.spec.selector };
          // statefulset.kubernetes.io/pod-name is set on each pod by the StatefulSet controller.
          const podName = selector['statefulset.kubernetes.io/pod-name'];
          delete selector['statefulset.kubernetes.io/pod-name'];
          const selected = pods.filter((p) => matches(selector, p.labels));
          expect(selected.length, `${name}: Service ${object.metadata.name} selects no pod`).toBeGreaterThan(0);
          if (podName) {
            const set = objects.find(
              (o) => o.kind === 'StatefulSet' && matches(selector, o.spec.template.metadata.labels),
            );
            const ordinal = Number(podName.slice(`${set?.metadata.name}-`.length));
            expect(podName.startsWith(`${set?.metadata.name}-`) && ordinal < set?.spec.replicas, podName).toBe(true);
          }
          const ports = selected.flatMap((p) => p.pod.containers.flatMap((c: Container) => c.ports ?? []));
          for (const port of object.spec.ports) {
            expect(
              ports.some((p: Container) => p.name === port.targetPort || p.containerPort === port.targetPort),
              `${name}: Service ${object.metadata.name} → ${port.targetPort}`,
            ).toBe(true);
          }
        }
        if (object.kind === 'StatefulSet') {
          const service = find(objects, 'Service', object.spec.serviceName);
          expect(service.spec.clusterIP, 'a StatefulSet governs through a headless Service').toBe('None');
        }
        if (object.kind === 'Ingress') {
          for (const rule of object.spec.rules) {
            for (const path of rule.http.paths) find(objects, 'Service', path.backend.service.name);
          }
        }
      }
    }
  });

  it('runs every Tether container with flags and TETHER_* variables its app accepts (per its --help)', () => {
    let checked = 0;
    for (const { build: name, object, pod } of workloads()) {
      for (const container of pod.containers) {
        const app = isTetherImage(container.image);
        if (!app) continue;
        const objects = builds.find((b) => b.name === name)?.objects ?? [];
        const used = invocationsOf(objects, container, `${object.metadata.name}-0`);
        expect(
          used.map((u) => u.app),
          `${name}: ${container.name} runs its image's app`,
        ).toEqual([app]);
        for (const invocation of used) {
          expect(unknownFlags(invocation), `${name}: ${container.name}: ${app} flags`).toEqual([]);
          checked++;
        }
        const variables = [
          ...(container.env ?? []).map((e: Container) => e.name as string),
          ...inlineTetherVariables(commandLine(objects, container, 'x')),
        ];
        expect(unknownTetherVariables(variables, used), `${name}: ${container.name}: TETHER_* variables`).toEqual([]);
      }
    }
    expect(checked).toBeGreaterThanOrEqual(4);
    // The check is live: a flag the app lacks is found.
    expect(
      unknownFlags({ app: 'relay', subcommand: ['serve'], args: ['--public-url', 'x', '--no-such-flag'] }),
    ).toEqual(['--no-such-flag']);
    expect(appHelp('relay', ['serve'])).toContain('--public-url');
  });

  it('probes every Tether container on /livez and /readyz', () => {
    for (const { build: name, pod } of workloads()) {
      for (const container of pod.containers) {
        if (!isTetherImage(container.image)) continue;
        const where = `${name}: ${container.name}`;
        expect(probePath(container.readinessProbe), `${where} readiness`).toBe('/readyz');
        expect(probePath(container.livenessProbe), `${where} liveness`).toBe('/livez');
        for (const probe of [container.readinessProbe, container.livenessProbe]) {
          if (!probe.httpGet) continue;
          expect(
            (container.ports ?? []).some(
              (p: Container) => p.name === probe.httpGet.port || p.containerPort === probe.httpGet.port,
            ),
            `${where}: probe port ${probe.httpGet.port}`,
          ).toBe(true);
        }
      }
    }
  });

  it('defines every $(VAR) a container refers to (env values: earlier in its env, as Kubernetes expands them)', () => {
    let references = 0;
    for (const { build: name, pod } of workloads()) {
      for (const container of pod.containers) {
        const defined: string[] = [];
        for (const variable of container.env ?? []) {
          for (const match of String(variable.value ?? '').matchAll(/(?<!\$)\$\(([A-Za-z_]\w*)\)/g)) {
            expect(defined, `${name}: ${container.name} ${variable.name}`).toContain(match[1]);
            references++;
          }
          defined.push(variable.name);
        }
        const line = [...(container.command ?? []), ...(container.args ?? [])].join(' ');
        for (const match of line.matchAll(/(?<!\$)\$\(([A-Za-z_]\w*)\)/g)) {
          expect(defined, `${name}: ${container.name} command line`).toContain(match[1]);
          references++;
        }
      }
    }
    expect(references).toBeGreaterThan(0);
  });

  it('exports OTLP when ConfigMap tether-telemetry names an endpoint, and marks /metrics for Prometheus', () => {
    for (const { build: name, object, pod } of workloads()) {
      for (const container of pod.containers) {
        const app = isTetherImage(container.image);
        if (!app) continue;
        const endpoint = container.env.find((e: Container) => e.name === 'OTEL_EXPORTER_OTLP_ENDPOINT');
        expect(endpoint?.valueFrom?.configMapKeyRef, `${name}: ${container.name}`).toEqual({
          name: 'tether-telemetry',
          key: 'otlp-endpoint',
          optional: true,
        });
        expect(container.env.find((e: Container) => e.name === 'OTEL_SERVICE_NAME')?.value).toBe(`tether-${app}`);
        // Replicas stay apart in the collector.
        expect(container.env.find((e: Container) => e.name === 'OTEL_RESOURCE_ATTRIBUTES')?.value).toBe(
          'service.instance.id=$(POD_NAME)',
        );
        if (app === 'executor') continue;
        // The registry and relays serve /metrics on their listening port.
        const annotations = object.spec.template.metadata.annotations ?? {};
        expect(annotations['prometheus.io/scrape'], `${name}: ${object.metadata.name}`).toBe('true');
        expect(annotations['prometheus.io/path']).toBe('/metrics');
        expect(container.ports.map((p: Container) => String(p.containerPort))).toContain(
          annotations['prometheus.io/port'],
        );
      }
    }
  });

  it('runs every pod non-root, without capabilities, on a read-only root, with RuntimeDefault seccomp and bounded resources', () => {
    for (const { build: name, object, pod } of workloads()) {
      const where = `${name}: ${object.kind} ${object.metadata.name}`;
      expect(pod.securityContext?.runAsNonRoot, where).toBe(true);
      expect(pod.securityContext?.runAsUser, where).toBeGreaterThan(0);
      expect(pod.securityContext?.seccompProfile?.type, where).toBe('RuntimeDefault');
      expect(pod.automountServiceAccountToken, `${where}: no API token`).toBe(false);
      for (const flag of ['hostNetwork', 'hostPID', 'hostIPC']) expect(pod[flag], `${where} ${flag}`).not.toBe(true);
      for (const container of [...(pod.initContainers ?? []), ...pod.containers]) {
        const context = container.securityContext ?? {};
        const at = `${where}: ${container.name}`;
        expect(context.allowPrivilegeEscalation, at).toBe(false);
        expect(context.readOnlyRootFilesystem, at).toBe(true);
        expect(context.capabilities?.drop, at).toEqual(['ALL']);
        expect(context.capabilities?.add, at).toBeUndefined();
        expect(context.privileged, at).not.toBe(true);
        expect(context.runAsUser ?? 1, at).toBeGreaterThan(0);
        for (const kind of ['requests', 'limits']) {
          expect(container.resources?.[kind]?.cpu, `${at} cpu ${kind}`).toBeDefined();
          expect(container.resources?.[kind]?.memory, `${at} memory ${kind}`).toBeDefined();
        }
      }
    }
  });

  it('takes keys, tokens and the database URL from Secrets, and commits none', () => {
    for (const dir of [join(k8s, 'base'), ...overlays]) {
      expect(Object.keys(readKustomization(dir))).not.toContain('secretGenerator');
    }
    const secretNames = new Set<string>();
    for (const { name, objects } of builds) {
      expect(
        objects.filter((o) => o.kind === 'Secret').map((o) => o.metadata.name),
        `${name}: Secret objects`,
      ).toEqual([]);
      for (const object of objects) {
        const pod = podSpecOf(object);
        if (!pod) continue;
        for (const volume of pod.volumes ?? []) {
          if (!volume.secret) continue;
          secretNames.add(volume.secret.secretName);
          // Group-readable (fsGroup) by the service user, nobody else; never world-readable.
          expect(volume.secret.defaultMode, `${volume.name}`).toBe(0o440);
        }
        for (const container of containersOf(object)) {
          for (const variable of container.env ?? []) {
            if (variable.valueFrom?.secretKeyRef) secretNames.add(variable.valueFrom.secretKeyRef.name);
            if (/KEY|TOKEN|PASSWORD|SECRET|DATABASE/.test(variable.name)) {
              expect(variable.value, `${name}: ${container.name} ${variable.name} is inline`).toBeUndefined();
              expect(variable.valueFrom?.secretKeyRef, `${name}: ${container.name} ${variable.name}`).toBeDefined();
            }
          }
          const line = [...(container.command ?? []), ...(container.args ?? [])].join(' ');
          expect(line, `${name}: ${container.name}: a credential on the command line`).not.toMatch(
            /--registry-token\b|--api-key\b|postgres(ql)?:\/\/\S*:\S*@/,
          );
        }
      }
    }
    expect([...secretNames].sort()).toEqual([
      'tether-executor-example-key',
      'tether-executor-sidecar-key',
      'tether-registry-database',
      'tether-registry-signing-key',
      'tether-relay-keys',
    ]);
    // docs/deployment.md says how to create each of them.
    const guide = readFileSync(join(root, 'docs', 'deployment.md'), 'utf8');
    for (const secret of secretNames) {
      expect(guide.includes(`kubectl create secret generic ${secret}`), `docs/deployment.md creates ${secret}`).toBe(
        true,
      );
    }
  });

  it('runs each app from its own image, every Tether image at one tag, no image untagged or :latest', () => {
    for (const { name, objects } of builds) {
      const tags = new Set<string>();
      for (const object of objects) {
        for (const container of containersOf(object)) {
          const { tag, digest } = splitImage(container.image);
          expect(tag ?? digest, `${name}: ${container.image} is pinned`).toBeDefined();
          expect(tag, `${name}: ${container.image}`).not.toBe('latest');
          const app = isTetherImage(container.image);
          if (!app) continue;
          tags.add(tag ?? digest ?? '');
          const used = invocationsOf(objects, container, `${object.metadata.name}-0`);
          expect(
            used.map((u) => u.app),
            `${name}: ${container.image}`,
          ).toEqual([app]);
        }
      }
      expect(tags.size, `${name}: Tether image tags ${[...tags].join(', ')}`).toBe(1);
    }
  });

  it('lists in the registry exactly the URL each relay pod announces (and reads its own key)', () => {
    for (const { name, objects } of builds) {
      const relays = objects.filter(
        (o) => o.kind === 'StatefulSet' && isTetherImage(o.spec.template.spec.containers[0].image) === 'relay',
      );
      expect(relays.length, name).toBe(1);
      const relay = relays[0] as K8sObject;
      const container = relay.spec.template.spec.containers[0];
      const announced: string[] = [];
      for (let ordinal = 0; ordinal < relay.spec.replicas; ordinal++) {
        const pod = `${relay.metadata.name}-${ordinal}`;
        const line = commandLine(objects, container, pod);
        const args = invocations(line)[0]?.args ?? [];
        const url = args[args.indexOf('--public-url') + 1] as string;
        expect(url, `${name}: ${pod} --public-url`).toMatch(/^wss?:\/\/[^\s$()]+$/);
        announced.push(url);
        // Its key: the Secret entry named after the pod, and nothing else.
        expect(line).toContain(`TETHER_RELAY_REGISTRY_TOKEN="$(cat /etc/tether/relay-keys/${pod})"`);
      }
      expect(new Set(announced).size, `${name}: relay URLs differ per pod`).toBe(announced.length);

      const registry = find(objects, 'Deployment', 'registry');
      const registryContainer = registry.spec.template.spec.containers[0];
      expect(registry.spec.replicas, 'registry replicas').toBeGreaterThanOrEqual(2);
      const registryArgs = invocations(commandLine(objects, registryContainer, 'registry'))[0]?.args ?? [];
      const listed = registryArgs.flatMap((arg, i) => (registryArgs[i - 1] === '--relay-url' ? arg.split(',') : []));
      expect(listed, name).toEqual(announced);
      // The relays dial the registry's Service.
      const registryUrl = (invocations(commandLine(objects, container, 'relay-0'))[0]?.args ?? []).find((a) =>
        a.startsWith('http'),
      );
      expect(registryUrl).toBe(`http://${registry.metadata.name}:8080`);
      find(objects, 'Service', registry.metadata.name);
    }
  });

  it('gives every registry replica the database from a Secret and one shared signing key', () => {
    for (const { name, objects } of builds) {
      const registry = find(objects, 'Deployment', 'registry');
      const container = registry.spec.template.spec.containers[0];
      const database = container.env.find((e: Container) => e.name === 'TETHER_REGISTRY_DATABASE');
      expect(database?.valueFrom?.secretKeyRef?.name, name).toBe('tether-registry-database');
      const args = invocations(commandLine(objects, container, 'registry'))[0]?.args ?? [];
      const keyFile = args[args.indexOf('--signing-key-file') + 1] as string;
      const mount = container.volumeMounts.find((m: Container) => keyFile.startsWith(`${m.mountPath}/`));
      const volume = registry.spec.template.spec.volumes.find((v: Container) => v.name === mount?.name);
      expect(volume?.secret?.secretName, `${name}: ${keyFile}`).toBe('tether-registry-signing-key');
      expect(args).not.toContain('--database');
    }
  });

  it('keeps each executor listener on loopback, its key out of files, and node as PID 1 (no init holding the key)', () => {
    let executors = 0;
    for (const { build: name, pod } of workloads()) {
      for (const container of pod.containers) {
        if (isTetherImage(container.image) !== 'executor') continue;
        executors++;
        const args: string[] = container.args;
        expect(container.command, name).toEqual(['node', 'apps/executor/dist/main.js']);
        expect(args[args.indexOf('--listen') + 1], name).toMatch(/^ws:\/\/127\.0\.0\.1:\d+$/);
        expect(args).toContain('--registry');
        expect(args).toContain('--environment-id');
        const key = container.env.find((e: Container) => e.name === 'TETHER_EXECUTOR_API_KEY');
        expect(key?.valueFrom?.secretKeyRef?.key, name).toBe('api-key');
        expect(pod.shareProcessNamespace, name).not.toBe(true);
      }
    }
    expect(executors).toBe(2 * builds.length);
    // The sidecar shares a volume with its app.
    for (const { name, objects } of builds) {
      const sidecar = find(objects, 'Deployment', 'app-with-executor').spec.template.spec;
      const mounts = sidecar.containers.map((c: Container) =>
        (c.volumeMounts ?? []).map((m: Container) => m.name as string),
      ) as string[][];
      expect(sidecar.containers.length, name).toBe(2);
      expect(
        mounts[0]?.filter((m) => mounts[1]?.includes(m)),
        name,
      ).toContain('workspace');
    }
  });

  it('trusts X-Forwarded-For in the registry and relays only where an ingress proxies them', () => {
    for (const { name, objects } of builds) {
      for (const [kind, objectName, app] of [
        ['Deployment', 'registry', 'REGISTRY'],
        ['StatefulSet', 'relay', 'RELAY'],
      ] as const) {
        const container = find(objects, kind, objectName).spec.template.spec.containers[0];
        const variable = container.env.find((e: Container) => e.name === `TETHER_${app}_TRUST_PROXY`);
        expect(variable?.valueFrom?.configMapKeyRef, `${name}: ${objectName}`).toEqual({
          name: 'tether-network',
          key: 'trust-proxy',
          optional: true,
        });
      }
      const network = objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === 'tether-network');
      const proxied = objects.some((o) => o.kind === 'Ingress');
      expect(network !== undefined, `${name}: tether-network exactly where an Ingress is`).toBe(proxied);
      if (network) {
        for (const block of String(network.data['trust-proxy']).split(',')) {
          expect(block, name).toMatch(/^\d{1,3}(\.\d{1,3}){3}(\/\d{1,2})?$|^[0-9a-f:]+(\/\d{1,3})?$/);
        }
      }
    }
  });

  it('opens the relay to all, the registry to labelled clients, PostgreSQL to the registry only, executors to none', () => {
    for (const { name, objects } of builds) {
      const policy = (policyName: string) => find(objects, 'NetworkPolicy', policyName).spec;
      const relay = policy('relay');
      expect(relay.podSelector.matchLabels).toEqual({ 'app.kubernetes.io/name': 'relay' });
      expect(relay.ingress, name).toEqual([{ ports: [{ protocol: 'TCP', port: 8081 }] }]);
      const registry = policy('registry');
      expect(registry.ingress[0].from[0].podSelector.matchLabels).toEqual({ 'tether.dev/registry-client': 'true' });
      const postgres = policy('postgres');
      expect(postgres.ingress, name).toEqual([
        {
          from: [{ podSelector: { matchLabels: { 'app.kubernetes.io/name': 'registry' } } }],
          ports: [{ protocol: 'TCP', port: 5432 }],
        },
      ]);
      const executor = policy('executor');
      expect(executor.policyTypes).toEqual(['Ingress']);
      expect(executor.ingress).toEqual([]);
      // Every pod that calls the registry carries the label the registry's policy admits.
      for (const object of objects) {
        const pod = podSpecOf(object);
        if (!pod) continue;
        const labels = object.spec.template.metadata.labels;
        const callsRegistry = pod.containers.some((c: Container) =>
          /http:\/\/registry:8080/.test([...(c.command ?? []), ...(c.args ?? [])].join(' ')),
        );
        if (callsRegistry) expect(labels['tether.dev/registry-client'], object.metadata.name).toBe('true');
      }
    }
  });
});
