import {
  CapabilitiesDiscoverV2Params,
  type CapabilityRootDiscovery,
  CapabilityRootsDiscoverV1Params,
  decode,
  FileUriError,
  fileUriToPath,
  MAX_CAPABILITY_ROOTS,
  Method,
  RpcError,
} from '@tether/exec-protocol';
import { discoverInstalled } from '../capabilities/discover-plugins.js';
import { discoverCapabilityRoot } from '../capabilities/discover-roots.js';
import { discoverV2Answer, type SkillsDiscovery } from '../capabilities/discover-skills.js';
import { skillRoots } from '../capabilities/skill-roots.js';
import { confinement, runConfined } from '../fs/confined.js';
import type { HandlerTable } from './types.js';

/** `confinement`, with the name Codex gives the sandbox's struct in discoverV2 (not its fs/* `Wire…` one). */
function discoveryConfinement(sandbox: unknown) {
  try {
    return confinement(sandbox);
  } catch (err) {
    if (RpcError.is(err) && err.message.endsWith('expected struct WireFileSystemSandboxContext')) {
      throw RpcError.invalidParams(err.message.replace(/WireFileSystemSandboxContext$/, 'FileSystemSandboxContext'));
    }
    throw err;
  }
}

/**
 * Codex's capability discovery. `capabilities/discoverV2` searches this machine's skill roots
 * (capabilities/discover-skills.ts), `capabilityRoots/discoverV1` the roots a client names
 * (capabilities/discover-roots.ts); each inside the fs sandbox helper when its sandbox restricts the disk, so
 * that what the policy hides is not read (CODEX-FINDINGS, capability discovery).
 */
export const capabilityHandlers: HandlerTable = {
  [Method.capabilitiesDiscoverV2]: async (raw, ctx) => {
    const params = decode(CapabilitiesDiscoverV2Params, raw);
    try {
      fileUriToPath(params.cwd);
    } catch (err) {
      // Codex parses the cwd as a URI and uses it no further: another host's file URI is accepted.
      if (!(err instanceof FileUriError)) throw err;
      if (err.kind === 'syntax') throw RpcError.invalidParams(err.message);
    }
    const sandbox = params.sandbox as { cwd?: unknown } | null | undefined;
    if (typeof sandbox === 'object' && sandbox !== null && sandbox.cwd === null) {
      // Codex's discovery needs the sandbox's own cwd.
      throw RpcError.invalidParams('invalid type: null, expected a string');
    }
    const confined = discoveryConfinement(params.sandbox);
    const { roots, pluginCache } = skillRoots();
    const found = confined
      ? ((await runConfined(ctx, confined, 'discoverSkills', { roots, pluginCache })) as SkillsDiscovery)
      : await discoverInstalled(roots, pluginCache);
    return discoverV2Answer(found);
  },

  // The roots in request order, each under its own sandbox (capabilities/discover-roots.ts).
  [Method.capabilityRootsDiscoverV1]: async (raw, ctx) => {
    const params = decode(CapabilityRootsDiscoverV1Params, raw);
    if (params.roots.length > MAX_CAPABILITY_ROOTS) {
      throw RpcError.invalidRequest(`capability root discovery accepts at most ${MAX_CAPABILITY_ROOTS} roots`);
    }
    const requests = params.roots.map((root) => {
      let path: string | null = null;
      let problem = '';
      try {
        path = fileUriToPath(root.path);
      } catch (err) {
        if (!(err instanceof FileUriError)) throw err;
        if (err.kind === 'syntax') throw RpcError.invalidParams(err.message);
        problem = err.message;
      }
      return { args: { id: root.id, uri: root.path, path, problem }, confined: confinement(root.sandbox) };
    });
    const roots = [];
    for (const { args, confined } of requests) {
      roots.push(
        confined
          ? ((await runConfined(ctx, confined, 'discoverRoot', args)) as CapabilityRootDiscovery)
          : await discoverCapabilityRoot(args.id, args.uri, args.path, args.problem),
      );
    }
    return { roots };
  },
};
