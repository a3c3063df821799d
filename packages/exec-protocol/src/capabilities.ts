/**
 * Capability discovery (Codex 0.171.0's `capabilities/discoverV2` and `capabilityRoots/discoverV1`; see
 * tests/conformance/CODEX-FINDINGS.md, capability discovery): the skills and plugin files installed on the
 * executor's machine, which Codex's agent lists to the model. Types derive from the schemas.
 */
import { type Static, Type } from '@sinclair/typebox';
import { Nullable } from './schema-parts.js';

/** A FileSystemSandboxContext, validated by `parseSandbox` as for `fs/*`. */
const Sandbox = Type.Optional(Type.Unknown());

/** `capabilities/discoverV2`: `cwd` must be a URI (not otherwise used); `sandbox` confines the discovery. */
export const CapabilitiesDiscoverV2Params = Type.Object(
  { cwd: Type.String(), sandbox: Sandbox },
  { serde: 'DiscoverV2CapabilitiesRequest' },
);
export type CapabilitiesDiscoverV2Params = Static<typeof CapabilitiesDiscoverV2Params>;

export const SkillToolDependency = Type.Object({
  type: Type.String(),
  value: Type.String(),
  description: Nullable(Type.String()),
  transport: Nullable(Type.String()),
  command: Nullable(Type.String()),
  url: Nullable(Type.String()),
  oauthCallbackPort: Nullable(Type.Integer()),
});
export const SkillPolicy = Type.Object({
  allowImplicitInvocation: Nullable(Type.Boolean()),
  /** `codex`, `chatgpt`, `atlas`. */
  products: Type.Array(Type.String()),
});
/** One skill: the SKILL.md's URI, its front matter, and its `agents/openai.yaml`. */
export const ExecutorSkill = Type.Object({
  /** `<plugin namespace>:<name>` inside a plugin directory. */
  name: Type.String(),
  description: Type.String(),
  shortDescription: Nullable(Type.String()),
  path: Type.String(),
  /** `codex-home-skills`, `user-agent-skills` or `system-skills`, and that root's URI. */
  discoveryRoot: Type.Object({ id: Type.String(), path: Type.String() }),
  dependencies: Nullable(Type.Object({ tools: Type.Array(SkillToolDependency) })),
  policy: Nullable(SkillPolicy),
});
export type ExecutorSkill = Static<typeof ExecutorSkill>;
export const CapabilityTextFile = Type.Object({ path: Type.String(), contents: Type.String() });
export type CapabilityTextFile = Static<typeof CapabilityTextFile>;
/** An installed plugin: its chosen version's files, and its skills (named `<plugin>:<skill>`). */
export const ExecutorPlugin = Type.Object({
  /** `<plugin>@<marketplace>`. */
  id: Type.String(),
  displayName: Type.String(),
  remotePluginId: Nullable(Type.String()),
  version: Type.String(),
  root: Type.String(),
  files: Type.Object({
    manifest: CapabilityTextFile,
    mcpConfig: Nullable(CapabilityTextFile),
    appsConfig: Nullable(CapabilityTextFile),
  }),
  skills: Type.Array(Type.Omit(ExecutorSkill, ['discoveryRoot'])),
});
export type ExecutorPlugin = Static<typeof ExecutorPlugin>;
export const CapabilitiesDiscoverV2Result = Type.Object({
  /** Installed plugins (`$CODEX_HOME/plugins/cache`), by id. */
  plugins: Type.Array(ExecutorPlugin),
  skills: Type.Array(ExecutorSkill),
  /** A sorted set of fixed sentences (a limit reached, something left out). */
  warnings: Type.Array(Type.String()),
});
export type CapabilitiesDiscoverV2Result = Static<typeof CapabilitiesDiscoverV2Result>;
/** Most roots one `capabilityRoots/discoverV1` request may name (Codex's). */
export const MAX_CAPABILITY_ROOTS = 128;
export const CapabilityRootRequest = Type.Object({
  /** The caller's, answered unchanged. */
  id: Type.String(),
  path: Type.String(),
  sandbox: Sandbox,
});
export const CapabilityRootsDiscoverV1Params = Type.Object({ roots: Type.Array(CapabilityRootRequest) });
export type CapabilityRootsDiscoverV1Params = Static<typeof CapabilityRootsDiscoverV1Params>;
export const CapabilityRootDiscovery = Type.Object({
  id: Type.String(),
  path: Type.String(),
  plugin: Nullable(
    Type.Object({
      manifest: CapabilityTextFile,
      mcpConfig: Nullable(CapabilityTextFile),
      appsConfig: Nullable(CapabilityTextFile),
    }),
  ),
  skills: Type.Array(Type.Object({ instructions: CapabilityTextFile, metadata: Nullable(CapabilityTextFile) })),
  namespaceManifests: Type.Array(CapabilityTextFile),
  warnings: Type.Array(Type.String()),
  /** Why the root could not be discovered (then nothing else is filled). */
  error: Nullable(Type.String()),
});
export type CapabilityRootDiscovery = Static<typeof CapabilityRootDiscovery>;
export const CapabilityRootsDiscoverV1Result = Type.Object({ roots: Type.Array(CapabilityRootDiscovery) });
export type CapabilityRootsDiscoverV1Result = Static<typeof CapabilityRootsDiscoverV1Result>;
