"""redis-py (Debian python3-redis) against idgate's Redis-protocol listener.

Usage: resp_redis_py.py HOST PORT
Checks every command the way an application would call it, raises on the
first difference, and prints one JSON object with the ids it got (the Rust
test checks them against ids from other sources for collisions).
"""
import json
import sys

import redis

host, port = sys.argv[1], int(sys.argv[2])
out = {}


def expect_error(kind, fn, contains):
    try:
        fn()
    except kind as e:
        assert contains in str(e), (contains, str(e))
        return str(e)
    raise AssertionError(f"expected {kind} containing {contains!r}")


# Login as a named user, as redis-py does with username/password.
r = redis.Redis(host=host, port=port, username="app", password="secret",
                db=0, client_name="pytest", socket_timeout=60)
assert r.ping() is True
assert r.client_getname() == b"pytest" or r.client_getname() == "pytest"
assert isinstance(r.client_id(), int)

a = r.incr("orders")
b = r.incr("orders")
assert b > a, (a, b)
last = r.incrby("orders", 100)
assert last > b, (b, last)
block = list(range(last - 99, last + 1))
peek = int(r.get("orders"))
c = r.incr("orders")
assert c >= peek, (peek, c)
nxt = r.execute_command("IDGATE.NEXT", "events", 5)
assert len(nxt) == 5 and all(isinstance(x, int) for x in nxt), nxt
assert nxt == sorted(nxt) and len(set(nxt)) == 5, nxt
seq5 = r.execute_command("IDGATE.NEXT", "orders", 5)
assert seq5 == sorted(seq5) and len(set(seq5)) == 5, seq5

# A pipeline of 1000 INCRs: one round trip, 1000 distinct increasing ids.
p = r.pipeline(transaction=False)
for _ in range(1000):
    p.incr("orders")
piped = p.execute()
assert len(set(piped)) == 1000 and piped == sorted(piped), (a, b, last, c, seq5, piped[:3], piped[90:97])
assert piped[0] > c

# Errors say why, and the connection stays usable after each.
out["unknown"] = expect_error(redis.ResponseError, lambda: r.incr("nope"), "unknown generator 'nope'")
out["snowflake_incrby"] = expect_error(redis.ResponseError, lambda: r.incrby("events", 2), "snowflake")
out["bad_count"] = expect_error(redis.ResponseError, lambda: r.execute_command("INCRBY", "orders", "ten"), "not an integer")
out["zero"] = expect_error(redis.ResponseError, lambda: r.execute_command("IDGATE.NEXT", "orders", 0), "out of range")
out["too_many"] = expect_error(redis.ResponseError, lambda: r.execute_command("IDGATE.NEXT", "orders", 100001), "between 1 and 100000")
out["other_command"] = expect_error(redis.ResponseError, lambda: r.set("k", "v"), "unknown command 'SET'")
after = r.incr("orders")
assert after > piped[-1]

# Grants: `limited` may use orders only.
lim = redis.Redis(host=host, port=port, username="limited", password="lpw", socket_timeout=60)
lim_id = lim.incr("orders")
out["noperm"] = expect_error(redis.exceptions.NoPermissionError, lambda: lim.incr("events"), "no grant for generator")

# AUTH failures.
bad = redis.Redis(host=host, port=port, username="app", password="wrong", socket_timeout=60)
out["wrongpass"] = expect_error((redis.AuthenticationError, redis.ResponseError), bad.ping, "invalid username-password")
anon = redis.Redis(host=host, port=port, socket_timeout=60)
out["noauth"] = expect_error((redis.AuthenticationError, redis.ResponseError), lambda: anon.incr("orders"), "Authentication required")

# AUTH with a password only logs in as the user named `default`.
d = redis.Redis(host=host, port=port, password="dpw", socket_timeout=60)
d_id = d.incr("orders")

# SELECT: only database 0.
out["select"] = expect_error(redis.ResponseError, lambda: redis.Redis(host=host, port=port, username="app", password="secret", db=1).ping(), "out of range")

out["ids"] = [a, b, c, after, lim_id, d_id] + block + seq5 + piped
out["snowflake"] = nxt
print(json.dumps(out))
