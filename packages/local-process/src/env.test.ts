import { describe, expect, it } from 'vitest';
import { buildChildEnv, type EnvPolicy } from './env.js';

/** The server's variables a child inherits by default, and those the default excludes (*KEY* *SECRET* *TOKEN*) drop. */
const ordinary = { PATH: '/usr/bin:/bin', HOME: '/home/u', Lang: 'C.UTF-8', EDITOR: 'vi' };
const secrets = { AWS_SECRET_ACCESS_KEY: 's', github_token: 't', MY_API_KEY: 'k' };
const server = {
  ...ordinary,
  ...secrets,
  CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE: '1',
  NODE_REPL_AUTH_TOKEN: 'n',
  UNSET: undefined,
};

function policy(overrides: Partial<EnvPolicy> = {}): EnvPolicy {
  return { inherit: 'all', ignoreDefaultExcludes: false, exclude: [], set: {}, includeOnly: [], ...overrides };
}

describe('buildChildEnv', () => {
  it('without a policy is exactly env, nothing inherited', () => {
    expect(buildChildEnv({ A: '1', path: 'x' }, null, server)).toEqual({ A: '1', path: 'x' });
    expect(buildChildEnv({}, undefined, server)).toEqual({});
  });

  it('always strips the exec-server variable and the non-inheritable names, case-insensitively', () => {
    const env = {
      codex_exec_server_exit_on_stdin_close: '1',
      Codex_Exec_Server_Noise_Auth_Token: 'x',
      NODE_REPL_AUTH_TOKEN: 'x',
      OPENAI_FEDERATION_RULE_ID: 'x',
      openai_identity_token_file: 'x',
      OPENAI_WORKLOAD_IDENTITY_CONTEXT: 'x',
      KEEP: 'yes',
    };
    expect(buildChildEnv(env, null, {})).toEqual({ KEEP: 'yes' });
    expect(buildChildEnv(env, policy({ ignoreDefaultExcludes: true }), server)).toMatchObject({ KEEP: 'yes' });
    expect(buildChildEnv({}, policy({ ignoreDefaultExcludes: true }), server)).not.toHaveProperty(
      'CODEX_EXEC_SERVER_EXIT_ON_STDIN_CLOSE',
    );
  });

  it('inherit all drops *KEY* *SECRET* *TOKEN* by default (case-insensitive)', () => {
    expect(buildChildEnv({}, policy(), server)).toEqual(ordinary);
  });

  it('ignoreDefaultExcludes keeps them (the non-inheritable names still go)', () => {
    expect(buildChildEnv({}, policy({ ignoreDefaultExcludes: true }), server)).toEqual({ ...ordinary, ...secrets });
  });

  it('inherit core keeps only core names, matched case-insensitively', () => {
    expect(buildChildEnv({}, policy({ inherit: 'core' }), server)).toEqual({
      PATH: '/usr/bin:/bin',
      HOME: '/home/u',
      Lang: 'C.UTF-8',
    });
  });

  it('inherit none starts empty', () => {
    expect(buildChildEnv({}, policy({ inherit: 'none', set: { A: '1' } }), server)).toEqual({ A: '1' });
  });

  it('exclude globs support * and ? and ignore case', () => {
    const result = buildChildEnv({}, policy({ exclude: ['p?th', 'ed*'] }), server);
    expect(result).toEqual({ HOME: '/home/u', Lang: 'C.UTF-8' });
  });

  it('treats regex characters in globs literally', () => {
    const env = { 'A.B': '1', AXB: '2', 'C+': '3' };
    expect(buildChildEnv({}, policy({ exclude: ['A.B', 'C+'] }), env)).toEqual({ AXB: '2' });
  });

  it('set is applied after excludes, includeOnly after set, and env overlays last', () => {
    const result = buildChildEnv(
      { OVERLAY: 'env', PICK_ME: 'from-env' },
      policy({
        exclude: ['PICK_*'],
        // set survives the excludes (inserted after them) ...
        set: { PICK_SET: 'from-set', DROPPED: 'x', PICK_ME: 'from-set' },
        // ... but not includeOnly
        includeOnly: ['pick_*', 'path'],
      }),
      { ...server, PICK_SERVER: 'excluded' },
    );
    expect(result).toEqual({
      PATH: '/usr/bin:/bin',
      PICK_SET: 'from-set',
      PICK_ME: 'from-env',
      OVERLAY: 'env',
    });
  });

  it('an overlaid name is not filtered by the policy', () => {
    const result = buildChildEnv({ MY_TOKEN: 'mine' }, policy({ inherit: 'none', includeOnly: ['NOTHING'] }), server);
    expect(result).toEqual({ MY_TOKEN: 'mine' });
  });
});
