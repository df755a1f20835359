-- A scattered read ordered by a string column, for scripts/bench.sh
-- (workload scatter_string): the ten rows with the smallest c (CHAR(120) in
-- the server's default collation, utf8mb4_general_ci). Through idgate_sh
-- every shard runs it and idgate merges the shards' rows by the column's
-- collation; direct and HAProxy run it on the whole table on one server.
function thread_init()
  drv = sysbench.sql.driver()
  con = drv:connect()
end

function event()
  con:query("SELECT id, c FROM sbtest1 ORDER BY c, id LIMIT 10")
end

function thread_done()
  con:disconnect()
end
