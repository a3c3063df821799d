import type { CipherName } from './crypto.js';
import { NoiseError } from './errors.js';

/*
 * Wire-contract strings, frozen: changing any of them breaks interop with Codex (rendezvous.md §4.1).
 * The suite TAG travels in public-key JSON and spells the DH "X25519"; the protocol NAME is what
 * Clatter hashes at initialization (`Noise_<pattern>_<DH>+<KEM>_<cipher>_<hash>`) and spells it "25519".
 * Both KEMs are MLKEM768, so the KEM appears once. The ChaChaPoly names are derived the same way.
 */
export const SUITE_HYBRID_AESGCM = 'Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256';
export const SUITE_HYBRID_CHACHAPOLY = 'Noise_hybridIK_X25519+MLKEM768_ChaChaPoly_SHA256';
export const PROTOCOL_NAME_HYBRID_AESGCM = 'Noise_hybridIK_25519+MLKEM768_AESGCM_SHA256';
export const PROTOCOL_NAME_HYBRID_CHACHAPOLY = 'Noise_hybridIK_25519+MLKEM768_ChaChaPoly_SHA256';
/** The classic suite, implemented because published Noise vectors check the framework with it. */
export const PROTOCOL_NAME_CLASSIC_IK = 'Noise_IK_25519_ChaChaPoly_SHA256';
/** Registry `security_profile` tag for the Codex suite; not hashed anywhere. */
export const SECURITY_PROFILE_HYBRID_IK_V1 = 'noise_hybrid_ik_v1';

export type Suite = typeof SUITE_HYBRID_AESGCM | typeof SUITE_HYBRID_CHACHAPOLY;

/** Codex's suite is the default: it is the only one unmodified Codex binaries speak. */
export const DEFAULT_SUITE: Suite = SUITE_HYBRID_AESGCM;

export interface SuiteInfo {
  readonly suite: Suite;
  readonly protocolName: string;
  readonly cipher: CipherName;
}

const SUITES: ReadonlyMap<string, SuiteInfo> = new Map<string, SuiteInfo>([
  [SUITE_HYBRID_AESGCM, { suite: SUITE_HYBRID_AESGCM, protocolName: PROTOCOL_NAME_HYBRID_AESGCM, cipher: 'AESGCM' }],
  [
    SUITE_HYBRID_CHACHAPOLY,
    { suite: SUITE_HYBRID_CHACHAPOLY, protocolName: PROTOCOL_NAME_HYBRID_CHACHAPOLY, cipher: 'ChaChaPoly' },
  ],
]);

export const SUITE_NAMES: readonly Suite[] = [SUITE_HYBRID_AESGCM, SUITE_HYBRID_CHACHAPOLY];

export function isSuite(value: unknown): value is Suite {
  return typeof value === 'string' && SUITES.has(value);
}

/** Looks up a suite tag; anything we do not implement is `bad_suite`. */
export function suiteInfo(suite: unknown): SuiteInfo {
  const info = typeof suite === 'string' ? SUITES.get(suite) : undefined;
  if (info === undefined) throw new NoiseError('bad_suite', 'unsupported Noise suite');
  return info;
}
