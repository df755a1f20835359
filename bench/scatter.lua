-- A scattered read for scripts/bench.sh (workload scatter_select): the ten
-- rows with the smallest k. Through idgate_sh every shard runs it and idgate
-- merges the shards' ordered rows; direct and HAProxy run it on the whole
-- table on one server.
function thread_init()
  drv = sysbench.sql.driver()
  con = drv:connect()
end

function event()
  con:query("SELECT id, k FROM sbtest1 ORDER BY k, id LIMIT 10")
end

function thread_done()
  con:disconnect()
end
