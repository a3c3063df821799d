/**
 * Builds a kustomization the way `kubectl kustomize` does, for the few fields infra/k8s uses (the kustomize
 * binary cannot be fetched here): `resources` (YAML files and directories holding a kustomization),
 * `patches` by path (strategic merge of maps and scalars, the only kind of patch used), `namespace` and
 * `images`. Any other field, or a patch that would need list-merge semantics, is refused, so that a
 * manifest this cannot build the way kustomize does fails the test instead of passing unchecked.
 *
 * YAML is read as YAML 1.1, as Kubernetes reads it: `defaultMode: 0440` is octal.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { parse, parseAllDocuments } from 'yaml';

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; [key: string]: unknown };
  // biome-ignore lint/suspicious/noExplicitAny: manifests are checked field by field by the tests.
  [key: string]: any;
}

const SUPPORTED = new Set(['apiVersion', 'kind', 'resources', 'patches', 'namespace', 'images']);
const CLUSTER_SCOPED = new Set(['Namespace', 'ClusterRole', 'ClusterRoleBinding', 'PersistentVolume', 'StorageClass']);

export interface Kustomization {
  resources?: string[];
  patches?: Array<{ path?: string; target?: unknown; patch?: string }>;
  namespace?: string;
  images?: Array<{ name: string; newName?: string; newTag?: string; digest?: string }>;
}

export function readYamlDocuments(file: string): K8sObject[] {
  return parseAllDocuments(readFileSync(file, 'utf8'), { version: '1.1' })
    .map((document) => {
      if (document.errors.length > 0) throw new Error(`${file}: ${document.errors[0]?.message}`);
      return document.toJS() as K8sObject | null;
    })
    .filter((object): object is K8sObject => object !== null);
}

export function readKustomization(dir: string): Kustomization {
  const file = join(dir, 'kustomization.yaml');
  const kustomization = parse(readFileSync(file, 'utf8'), { version: '1.1' }) as Record<string, unknown>;
  for (const field of Object.keys(kustomization)) {
    if (!SUPPORTED.has(field)) throw new Error(`${file}: field ${field} is not understood by tests/infra/kustomize.ts`);
  }
  return kustomization as Kustomization;
}

/** The objects `kubectl kustomize DIR` would print, and every file that went into them. */
export function build(dir: string, files: Set<string> = new Set()): K8sObject[] {
  const kustomization = readKustomization(dir);
  files.add(join(dir, 'kustomization.yaml'));
  let objects: K8sObject[] = [];
  for (const resource of kustomization.resources ?? []) {
    const path = join(dir, resource);
    if (statSync(path).isDirectory()) {
      if (!existsSync(join(path, 'kustomization.yaml'))) throw new Error(`${path}: no kustomization.yaml`);
      objects.push(...build(path, files));
    } else {
      files.add(path);
      objects.push(...readYamlDocuments(path));
    }
  }
  for (const patch of kustomization.patches ?? []) {
    if (!patch.path || patch.target !== undefined || patch.patch !== undefined) {
      throw new Error(`${dir}: only patches by path (the target named in the patch) are understood`);
    }
    const path = join(dir, patch.path);
    files.add(path);
    for (const change of readYamlDocuments(path)) {
      const target = objects.find(
        (object) =>
          object.kind === change.kind &&
          object.metadata.name === change.metadata.name &&
          group(object.apiVersion) === group(change.apiVersion),
      );
      if (!target) throw new Error(`${path}: no ${change.kind} ${change.metadata.name} to patch`);
      objects = objects.map((object) => (object === target ? merge(object, change, path) : object));
    }
  }
  if (kustomization.namespace) {
    for (const object of objects) {
      if (!CLUSTER_SCOPED.has(object.kind)) object.metadata.namespace = kustomization.namespace;
    }
  }
  for (const image of kustomization.images ?? []) {
    for (const container of objects.flatMap(containersOf)) {
      const { name, tag } = splitImage(container.image as string);
      if (name !== image.name) continue;
      if (image.digest) container.image = `${image.newName ?? name}@${image.digest}`;
      else container.image = `${image.newName ?? name}${image.newTag ? `:${image.newTag}` : tag ? `:${tag}` : ''}`;
    }
  }
  return objects;
}

function group(apiVersion: string): string {
  return apiVersion.includes('/') ? (apiVersion.split('/')[0] as string) : '';
}

/** Strategic merge for maps and scalars; a list in a patch would need kustomize's merge keys: refused. */
function merge(base: unknown, patch: unknown, where: string): K8sObject {
  if (Array.isArray(patch)) throw new Error(`${where}: lists in patches are not understood`);
  if (patch === null || typeof patch !== 'object') return patch as K8sObject;
  const out: Record<string, unknown> = { ...(base as Record<string, unknown>) };
  for (const [key, value] of Object.entries(patch)) {
    const current = out[key];
    out[key] =
      value !== null && typeof value === 'object' && current !== null && typeof current === 'object'
        ? merge(current, value, `${where}: ${key}`)
        : Array.isArray(value)
          ? merge(undefined, value, `${where}: ${key}`)
          : value;
  }
  return out as K8sObject;
}

export function splitImage(image: string): { name: string; tag?: string; digest?: string } {
  const [withoutDigest, digest] = image.split('@') as [string, string | undefined];
  const slash = withoutDigest.lastIndexOf('/');
  const colon = withoutDigest.lastIndexOf(':');
  if (colon > slash) return { name: withoutDigest.slice(0, colon), tag: withoutDigest.slice(colon + 1), digest };
  return { name: withoutDigest, digest };
}

// biome-ignore lint/suspicious/noExplicitAny: a pod spec as written in the manifest.
export function podSpecOf(object: K8sObject): any | undefined {
  if (object.kind === 'Pod') return object.spec;
  if (['Deployment', 'StatefulSet', 'DaemonSet', 'ReplicaSet', 'Job'].includes(object.kind)) {
    return object.spec?.template?.spec;
  }
  if (object.kind === 'CronJob') return object.spec?.jobTemplate?.spec?.template?.spec;
  return undefined;
}

// biome-ignore lint/suspicious/noExplicitAny: containers as written in the manifest.
export function containersOf(object: K8sObject): any[] {
  const spec = podSpecOf(object);
  return spec ? [...(spec.initContainers ?? []), ...(spec.containers ?? [])] : [];
}
