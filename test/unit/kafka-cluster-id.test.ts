// scripts/kafka.sh formats each private broker's KRaft store with a new cluster id. An id that
// starts with '-' is read by kafka-storage's argument parser as an option, and the format fails
// ("argument --cluster-id/-t: expected one argument"): one start in 64 failed that way.
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';

describe('scripts/kafka.sh cluster ids', () => {
  it('are 22-character URL-safe base64 Kafka Uuids that never start with "-"', () => {
    // 400 ids: an unguarded generator yields a leading '-' with probability 1 - (63/64)^400 > 0.998.
    const out = execFileSync('bash', ['scripts/kafka.sh', 'cluster-id', '400'], { encoding: 'utf8' });
    const ids = out.trim().split('\n');
    expect(ids).toHaveLength(400);
    for (const id of ids) {
      expect(id).toMatch(/^[A-Za-z0-9_][A-Za-z0-9_-]{21}$/);
    }
    expect(new Set(ids).size).toBe(400);
  });
});
