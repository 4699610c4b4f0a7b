"""The ledger's one round trip a sync (ledger.py): a Lua script that adds this replica's counts and
reads every replica's back, and the Python on either side of it.

Why a script: a sync was two pipelined round trips (the writes and the active-key set, then each
active key's rate hashes and the budgeted spend), ~10 commands at ~20 µs each of redis-py's packing
and parsing, four times a second on every replica whether it served anything or not. One `EVAL`
carries the same work as a few strings and returns it as a few strings.

Every key it touches is under the ledger's hash tag (`{<prefix>:use}`), the active set declared as
KEYS[1], so on a Redis Cluster the script runs on the one node that holds them all (as the
telemetry store's scripts do: telemetry/redis_wire.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gateway.access.sliding import SlidingMinute

# KEYS[1] = the active set (key id -> when a replica last counted it).
# ARGV[1] = spend to add, a line per name: "name\tamount\tttl"; its new totals are returned.
# ARGV[2] = rate buckets to add, a line each: "hash\tsecond\tamount" (each hash then expires in ARGV[3] s).
# ARGV[4] = key ids this replica counted, a line each: "id\twhen"; ARGV[5] = forget ids older than this.
# ARGV[6] = the rate hashes' prefix; ARGV[7], ARGV[8] = the last minute and this one.
# ARGV[9] = spend names to read, one per line.
# Returns {spend totals, active ids, per id its "req" then "tok" buckets of both minutes as one
# tab-joined string "second\tamount\t...", the spend values read (nil where there is none)}.
SYNC_SCRIPT = """
local totals = {}
for name, amount, ttl in string.gmatch(ARGV[1], '([^\\t\\n]+)\\t([^\\t\\n]+)\\t([^\\n]+)') do
  totals[#totals + 1] = redis.call('INCRBYFLOAT', name, amount)
  redis.call('EXPIRE', name, ttl)
end
local touched = {}
for name, second, amount in string.gmatch(ARGV[2], '([^\\t\\n]+)\\t([^\\t\\n]+)\\t([^\\n]+)') do
  redis.call('HINCRBYFLOAT', name, second, amount)
  touched[name] = true
end
for name in pairs(touched) do redis.call('EXPIRE', name, ARGV[3]) end
for id, when in string.gmatch(ARGV[4], '([^\\t\\n]+)\\t([^\\n]+)') do redis.call('ZADD', KEYS[1], when, id) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[5])
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
local rates = {}
for _, id in ipairs(ids) do
  for _, kind in ipairs({'reqs', 'toks'}) do
    local fields = {}
    for _, minute in ipairs({ARGV[7], ARGV[8]}) do
      for _, v in ipairs(redis.call('HGETALL', ARGV[6] .. ':' .. kind .. ':' .. id .. ':' .. minute)) do
        fields[#fields + 1] = v
      end
    end
    rates[#rates + 1] = table.concat(fields, '\\t')
  end
end
local values = {}
for name in string.gmatch(ARGV[9], '[^\\n]+') do values[#values + 1] = redis.call('GET', name) end
return {totals, ids, rates, values}
"""


def lines(rows: Iterable[Sequence[object]]) -> str:
    """Rows as the script reads them: fields tab-separated, a row per line (names hold neither)."""
    return "".join("\t".join(map(str, row)) + "\n" for row in rows)


def read_rates(ids: Sequence[bytes], rates: Sequence[bytes], oldest: int) -> dict[tuple[str, str], SlidingMinute]:
    """Each active key's every-replica counts over the seconds after `oldest`, from the script's
    reply: (kind, key id) -> its sliding minute, for the kinds that counted anything."""
    counts: dict[tuple[str, str], SlidingMinute] = {}
    for i, raw_id in enumerate(ids):
        key_id = raw_id.decode()
        for kind, text in zip(("req", "tok"), rates[2 * i:2 * i + 2], strict=True):
            if not text:
                continue
            parts = text.split(b"\t")
            sliding = counts[(kind, key_id)] = SlidingMinute()
            for second, amount in sorted(zip(map(int, parts[0::2]), map(float, parts[1::2]), strict=True)):
                if second > oldest:
                    sliding.add(second, amount)
    return counts
