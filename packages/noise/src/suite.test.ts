import { describe, expect, it } from 'vitest';
import {
  DEFAULT_SUITE,
  isSuite,
  PROTOCOL_NAME_HYBRID_AESGCM,
  PROTOCOL_NAME_HYBRID_CHACHAPOLY,
  SECURITY_PROFILE_HYBRID_IK_V1,
  SUITE_HYBRID_AESGCM,
  SUITE_HYBRID_CHACHAPOLY,
  suiteInfo,
} from './suite.js';

describe('suite names (rendezvous.md §4.1)', () => {
  it('spells the key suite tag with X25519 and the hashed protocol name with 25519', () => {
    expect(SUITE_HYBRID_AESGCM).toBe('Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256');
    expect(PROTOCOL_NAME_HYBRID_AESGCM).toBe('Noise_hybridIK_25519+MLKEM768_AESGCM_SHA256');
    expect(SUITE_HYBRID_CHACHAPOLY).toBe('Noise_hybridIK_X25519+MLKEM768_ChaChaPoly_SHA256');
    expect(PROTOCOL_NAME_HYBRID_CHACHAPOLY).toBe('Noise_hybridIK_25519+MLKEM768_ChaChaPoly_SHA256');
    expect(SECURITY_PROFILE_HYBRID_IK_V1).toBe('noise_hybrid_ik_v1');
    // Longer than HASHLEN, so h = SHA-256(name) rather than the zero-padded name.
    expect(PROTOCOL_NAME_HYBRID_AESGCM).toHaveLength(43);
  });

  it('maps each suite to its cipher and defaults to the Codex suite', () => {
    expect(DEFAULT_SUITE).toBe(SUITE_HYBRID_AESGCM);
    expect(suiteInfo(SUITE_HYBRID_AESGCM)).toEqual({
      suite: SUITE_HYBRID_AESGCM,
      protocolName: PROTOCOL_NAME_HYBRID_AESGCM,
      cipher: 'AESGCM',
    });
    expect(suiteInfo(SUITE_HYBRID_CHACHAPOLY).cipher).toBe('ChaChaPoly');
    expect(isSuite(PROTOCOL_NAME_HYBRID_AESGCM)).toBe(false);
    expect(() => suiteInfo('noise_hybrid_ik_v1')).toThrow(expect.objectContaining({ code: 'bad_suite' }));
  });
});
