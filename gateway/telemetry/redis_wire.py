"""The Redis wire format of the shared telemetry store: key names, the two Lua scripts, and the
conversion of buckets to the commands a flush sends and from the replies a refresh reads.

What it does: `KeyLayout` names every key; `WRITE_SCRIPT` applies one flush (deduplicated by a
per-flush token) and `READ_SCRIPT` reads many bucket hashes at once; `encode_flush` turns a batch of
pending buckets into WRITE_SCRIPT's command lines and `estimate_commands`/`split_batch` keep one flush
under a command budget; `parse_bucket`, `parse_late_member` and `sum_in_flight` turn what a refresh
reads back into Python values.

What it does not do: no I/O, no clock (callers pass `now`), no state: constants and pure functions,
testable without Redis. When to flush or refresh, and what to read, is `redis_store.py`'s job (with
`redis_reads.py`).

Redis key layout (prefix `P` = the hash tag `{ur:tel}` by default: `redisconn.hash_tag` wraps the store's
key prefix, so on a Redis Cluster every key below lives in one slot and the scripts may touch them all):
  P:b:<endpoint_key>:<bucket>  hash   additive fields, see `Bucket.to_fields`; TTL: bucket end + bucket_ttl_s
  P:endpoints                  zset   endpoint_key -> newest sample time (ZADD GT); TTL bucket_ttl_s
  P:inflight:<replica_id>      hash   endpoint_key -> in-flight count on that replica; TTL ~3 flushes
  P:replicas                   zset   replica_id -> last flush time; TTL 60 s
  P:late                       zset   "<endpoint_key>|<bucket>" -> time of a late write; TTL 240 s
  P:flush:<token>              string dedup marker of one applied flush; TTL 900 s
(Endpoint keys must not contain tab or newline: those are replaced by "_" in Redis names.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gateway.redisconn import hash_tag
from gateway.telemetry.bucket import Bucket
from gateway.telemetry.window import EndpointWindows

REPLICA_TTL_S = 60
LATE_KEEP_S = 120.0
DEDUP_TTL_S = 900

Batch = dict[str, EndpointWindows]  # endpoint key -> the buckets of one flush (or still pending)

# KEYS[1] = the flush's dedup key (declared, so a cluster client sends the script to the node of the
# store's hash tag), ARGV[1] = its TTL, ARGV[2] = commands, one per line, arguments separated by tabs.
# Returns the number of commands run, or 0 if this flush was applied before.
WRITE_SCRIPT = """
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return 0 end
local n = 0
for line in string.gmatch(ARGV[2], '[^\\n]+') do
  local args = {}
  for a in string.gmatch(line, '[^\\t]+') do args[#args + 1] = a end
  redis.call(unpack(args))
  n = n + 1
end
return n
"""

# KEYS = hashes; returns, per hash, its fields and values joined by tabs ("" when missing).
READ_SCRIPT = """
local out = {}
for i, k in ipairs(KEYS) do out[i] = table.concat(redis.call('HGETALL', k), '\\t') end
return out
"""


@dataclass(frozen=True, slots=True)
class KeyLayout:
    """The Redis key names under one prefix (see the module docstring); `prefix` is the hash tag
    (`KeyLayout.under("ur:tel")` makes one)."""

    prefix: str = "{ur:tel}"

    @staticmethod
    def under(key_prefix: str) -> KeyLayout:
        return KeyLayout(hash_tag(key_prefix))

    def bucket(self, endpoint_key: str, idx: int) -> str:
        """One endpoint's hash for bucket `idx`; pass the key through `safe_key` first."""
        return f"{self.prefix}:b:{endpoint_key}:{idx}"

    def inflight(self, replica_id: str) -> str:
        return f"{self.prefix}:inflight:{replica_id}"

    def flush(self, token: str) -> str:
        return f"{self.prefix}:flush:{token}"

    @property
    def endpoints(self) -> str:
        return f"{self.prefix}:endpoints"

    @property
    def replicas(self) -> str:
        return f"{self.prefix}:replicas"

    @property
    def late(self) -> str:
        return f"{self.prefix}:late"


def safe_key(key: str) -> str:
    """An endpoint key usable inside the tab/newline separated flush payload."""
    return key.replace("\t", "_").replace("\n", "_") if ("\t" in key or "\n" in key) else key


def late_member(endpoint_key: str, idx: int) -> str:
    """The P:late member naming one bucket (`endpoint_key` already through `safe_key`)."""
    return f"{endpoint_key}|{idx}"


def parse_late_member(member: str) -> tuple[str, int] | None:
    """(endpoint key, bucket) of a P:late member; None for a malformed one."""
    key, _, idx_s = member.rpartition("|")
    try:
        return key, int(idx_s)
    except ValueError:
        return None


def estimate_commands(b: Bucket) -> int:
    """Commands one bucket costs in a flush: its hash fields plus EXPIRE and directory updates."""
    fits = 6 * ((b.fit_tps.w > 0) + (b.fit_ttft.w > 0)) + 10 * (b.fit_prefill.w > 0)
    return len(b.n) + 6 + len(b.ttft_ms) + len(b.ttfat_ms) + len(b.decode_tps) + len(b.e2e_ms) + 4 + fits


def split_batch(pending: Batch, budget: int) -> tuple[Batch, Batch]:
    """Split pending buckets into (send now, keep pending) so one flush stays under `budget` commands
    (by `estimate_commands`); the newest buckets go first. Buckets sent are taken out of `pending`.

    At least one bucket is always sent, so a bucket larger than the budget still goes out.
    """
    sizes: list[tuple[int, str, int]] = []  # (bucket, key, estimated commands)
    total = 0
    for key, w in pending.items():
        for idx, b in w.items():
            n = estimate_commands(b)
            sizes.append((idx, key, n))
            total += n
    if total <= budget:
        return pending, {}
    batch: Batch = {}
    sizes.sort(reverse=True)  # newest buckets first
    used = 0
    for idx, key, n in sizes:
        if used and used + n > budget:
            break
        used += n
        src = pending[key]
        dst = batch.get(key)
        if dst is None:
            dst = batch[key] = EndpointWindows(src.bucket_s, src.max_window_s)
            dst.newest = src.newest
        b = src.pop_bucket(idx)
        if b is not None:
            dst.set_bucket(idx, b)
    rest = {k: w for k, w in pending.items() if len(w)}
    return batch, rest


def encode_flush(batch: Batch, now: float, *, layout: KeyLayout, bucket_s: float, bucket_ttl_s: int,
                 late_after_s: float) -> str:
    """WRITE_SCRIPT's commands for `batch`: one Redis command per line, arguments separated by tabs.

    Each bucket's fields are added with HINCRBY (ints) or HINCRBYFLOAT (floats) and its TTL set to
    bucket end + `bucket_ttl_s`; a bucket already expired is left out. A bucket written `late_after_s`
    or more after its end gets a P:late marker so readers that cached it read it again.
    """
    late_key = layout.late
    endpoints_key = layout.endpoints
    lines: list[str] = []
    add = lines.append
    any_late = False
    for key, w in batch.items():
        k = safe_key(key)
        for idx, b in w.items():
            end = (idx + 1) * bucket_s
            ttl = int(end + bucket_ttl_s - now)
            if ttl <= 0:
                continue
            rk = layout.bucket(k, idx)
            for f, v in b.to_fields().items():
                if type(v) is int:
                    add(f"HINCRBY\t{rk}\t{f}\t{v}")
                else:
                    add(f"HINCRBYFLOAT\t{rk}\t{f}\t{v!r}")
            add(f"EXPIRE\t{rk}\t{ttl}")
            if now >= end + late_after_s:
                add(f"ZADD\t{late_key}\t{now!r}\t{late_member(k, idx)}")
                any_late = True
        if w.newest is not None:
            add(f"ZADD\t{endpoints_key}\tGT\t{w.newest!r}\t{k}")
    if lines:
        add(f"ZREMRANGEBYSCORE\t{endpoints_key}\t-inf\t{now - bucket_ttl_s!r}")
        add(f"EXPIRE\t{endpoints_key}\t{bucket_ttl_s}")
    if any_late:
        add(f"ZREMRANGEBYSCORE\t{late_key}\t-inf\t{now - LATE_KEEP_S!r}")
        add(f"EXPIRE\t{late_key}\t{int(2 * LATE_KEEP_S)}")
    return "\n".join(lines)


def parse_bucket(reply: str) -> Bucket | None:
    """One READ_SCRIPT reply item (a hash's fields and values joined by tabs); None for "" (no hash)."""
    if not reply:
        return None
    parts = iter(reply.split("\t"))
    return Bucket.from_fields(dict(zip(parts, parts, strict=False)))


def sum_in_flight(hashes: Iterable[Mapping[str, str]]) -> dict[str, int]:
    """Endpoint key -> in-flight count summed over P:inflight hashes; unparsable counts are skipped."""
    sums: dict[str, int] = {}
    for h in hashes:
        for k, v in h.items():
            try:
                sums[k] = sums.get(k, 0) + int(v)
            except ValueError:
                continue
    return sums
