export { type BwrapPlan, bwrapArgs, type MountSources } from './bwrap.js';
export { likelySandboxDenied } from './denial.js';
export {
  PLATFORM_READ_ROOTS,
  PROTECTED_NAMES,
  type ResolvedEntry,
  resolvePolicy,
  type SandboxPolicy,
  SandboxPolicyError,
} from './policy.js';
export {
  type PreparedSandbox,
  type PrepareOptions,
  Sandboxer,
  type SandboxStatus,
  SandboxUnavailableError,
} from './sandboxer.js';
export { type SeccompMode, seccompProgram, seccompSupported } from './seccomp.js';
export {
  type NoteChild,
  probeTransparentTcp,
  resolvConfNameservers,
  routeTransparentTcp,
  TRANSPARENT_ROUTES,
  type TransparentTcpStatus,
  type TransparentTcpTools,
  transparentTcpRules,
} from './transparent-tcp.js';
