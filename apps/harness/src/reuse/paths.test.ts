import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { randomUuid } from '../random-id.js';
import { masterName } from './paths.js';

describe('master names', () => {
  it('are the SHA-256 names of earlier builds, so a running master is found by the next one', () => {
    const key = { registryUrl: 'https://registry.example.com/base', environmentId: 'dev-1', apiKey: 'treg_é-key' };
    const keyHash = createHash('sha256').update(key.apiKey).digest('hex');
    const expected = createHash('sha256')
      .update(JSON.stringify(['tether-master/1', 'https://registry.example.com/base', 'dev-1', keyHash]))
      .digest('hex')
      .slice(0, 24);
    expect(masterName(key)).toBe(expected);
    expect(masterName({ ...key, apiKey: 'treg_other' })).not.toBe(expected);
  });
});

describe('process ids', () => {
  it('are version 4 UUIDs, each its own', () => {
    const ids = Array.from({ length: 1000 }, () => randomUuid());
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(new Set(ids).size).toBe(ids.length);
  });
});
