// environmentConfig/read against both executors (every peer × transport), as Codex 0.171.0 answers it
// (CODEX-FINDINGS.md §18). Both read the same CODEX_HOME; the TOML texts are compared as parsed tables (each
// executor writes TOML its own way). The machine-wide layers (/etc/codex) are not touched here.
import { mkdirSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { fileUri, type TestClient } from '@tether/test-kit';
import { parse } from 'smol-toml';
import { describe, expect, it } from 'vitest';
import { CASES, useHarness } from './support.ts';

interface Layer {
  source: string;
  baseDir: string;
  toml: string;
}
interface Stack {
  layers: Layer[];
  cloudInsertionIndex: number;
}
interface ConfigResult {
  userHomeDir: string;
  codexHomeDir: string;
  hostname: string;
  config: Stack;
  requirements: Stack;
}

const parsed = (stack: Stack) =>
  stack.layers.map((layer) => ({ source: layer.source, baseDir: layer.baseDir, values: parse(layer.toml) }));

describe.each(CASES)('environmentConfig/read: %s', (label, { kind, transport }) => {
  const h = useHarness();
  let counter = 0;
  /** A CODEX_HOME with `config`, and a project directory trusted there (or not). */
  const setUp = (config: string) => {
    const root = join(h.workDir, `envconfig-${label.replace(/ /g, '-')}-${++counter}`);
    const home = join(root, 'codex-home');
    const project = join(root, 'project');
    mkdirSync(home, { recursive: true });
    mkdirSync(join(project, '.codex'), { recursive: true });
    writeFileSync(join(home, 'config.toml'), config.replaceAll('PROJECT', project));
    writeFileSync(join(project, '.codex', 'config.toml'), 'model = "project-model"\n');
    return { home, project };
  };
  const session = async (home: string) =>
    (await h.session(kind, transport, { env: { CODEX_HOME: home } })).client as TestClient;

  it('is advertised (environmentConfigRead) and gated like Codex', async () => {
    const peer = await h.start(kind, transport);
    const client = await h.connect(peer);
    expect(
      (await client.request('environmentConfig/read', { cwd: 'file:///', configPaths: [['x']], requirementsPaths: [] }))
        .error,
    ).toEqual({ code: -32600, message: 'client must call initialize before using environment config methods' });
    const { initializeResult } = await h.session(kind, transport);
    const info = initializeResult.environmentInfo as { capabilities: Record<string, unknown> };
    expect(info.capabilities.environmentConfigRead).toBe(true);
  });

  it('answers the user layer cut down to the requested paths, and a trusted project layer', async () => {
    const { home, project } = setUp(
      'sandbox_mode = "read-only"\nmodel = "user-model"\n[features]\nfoo = true\nbar = 2\n[a.b]\nc = [1, 2]\n[projects."PROJECT"]\ntrust_level = "trusted"\n',
    );
    const client = await session(home);
    const result = await client.call<ConfigResult>('environmentConfig/read', {
      cwd: fileUri(project),
      configPaths: [['sandbox_mode'], ['features', 'foo'], ['a', 'b', 'c'], ['nope'], ['model']],
      requirementsPaths: [],
    });
    expect(result.codexHomeDir).toBe(fileUri(home));
    expect(result.userHomeDir).toMatch(/^file:\/\//);
    expect(result.hostname).toBe(hostname());
    expect(result.config.cloudInsertionIndex).toBe(0);
    expect(parsed(result.config)).toEqual([
      {
        source: `user (${join(home, 'config.toml')})`,
        baseDir: fileUri(home),
        values: { sandbox_mode: 'read-only', model: 'user-model', features: { foo: true }, a: { b: { c: [1, 2] } } },
      },
      {
        source: `project (${join(project, '.codex', 'config.toml')})`,
        baseDir: fileUri(join(project, '.codex')),
        values: { model: 'project-model' },
      },
    ]);
    expect(result.requirements).toEqual({ layers: [], cloudInsertionIndex: 0 });
  });

  it('leaves out an untrusted project and a layer without any of the paths', async () => {
    const { home, project } = setUp('model = "user-model"\n');
    const client = await session(home);
    const result = await client.call<ConfigResult>('environmentConfig/read', {
      cwd: fileUri(project),
      configPaths: [['nope']],
      requirementsPaths: [],
    });
    expect(result.config).toEqual({ layers: [], cloudInsertionIndex: 0 });
    const model = await client.call<ConfigResult>('environmentConfig/read', {
      cwd: fileUri(project),
      configPaths: [['model']],
      requirementsPaths: [],
    });
    expect(parsed(model.config).map((layer) => layer.values)).toEqual([{ model: 'user-model' }]);
  });

  it('refuses bad parameters with -32602', async () => {
    const { home } = setUp('model = "m"\n');
    const client = await session(home);
    const error = async (params: unknown) => (await client.request('environmentConfig/read', params)).error;
    expect(await error({ cwd: 'file:///tmp', configPaths: [], requirementsPaths: [] })).toEqual({
      code: -32602,
      message: 'at least one config or requirements path is required',
    });
    expect(await error({ cwd: 'file:///tmp', configPaths: [[]], requirementsPaths: [] })).toEqual({
      code: -32602,
      message: 'TOML paths must contain at least one key segment',
    });
    expect(await error({ cwd: '/tmp', configPaths: [['model']], requirementsPaths: [] })).toEqual({
      code: -32602,
      message: 'invalid URI: relative URL without a base',
    });
    expect((await error({ cwd: 'file:///tmp', configPaths: [['model']] }))?.code).toBe(-32602);
    expect((await error(null))?.code).toBe(-32602);
  });

  it('fails with -32603 when CODEX_HOME names a directory that does not exist', async () => {
    const client = await session(join(h.workDir, 'no-such-codex-home'));
    const response = await client.request('environmentConfig/read', {
      cwd: 'file:///tmp',
      configPaths: [['model']],
      requirementsPaths: [],
    });
    expect(response.error?.code).toBe(-32603);
    expect(response.error?.message).toMatch(
      /^failed to find Codex home: CODEX_HOME points to .*, but that path does not exist$/,
    );
  });
});
