import {
  CapabilitiesDiscoverV2Params,
  decode,
  FileUriError,
  fileUriToPath,
  Method,
  RpcError,
} from '@tether/exec-protocol';
import { discoverSkills, discoverV2Answer, type SkillsDiscovery } from '../capabilities/discover-skills.js';
import { skillRoots } from '../capabilities/skill-roots.js';
import { confinement, runConfined } from '../fs/confined.js';
import type { HandlerTable } from './types.js';

/** `confinement`, with the name Codex gives the sandbox's struct here (not its fs/* `Wire…` one). */
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
 * Codex's capability discovery (capabilities/discover-skills.ts). `capabilities/discoverV2` searches this
 * machine's skill roots, inside the fs sandbox helper when the request's sandbox restricts the disk, so that a
 * root or file the policy hides is not read (CODEX-FINDINGS, capability discovery).
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
    const roots = skillRoots();
    const found = confined
      ? ((await runConfined(ctx, confined, 'discoverSkills', { roots })) as SkillsDiscovery)
      : await discoverSkills(roots);
    return discoverV2Answer(found);
  },
};
