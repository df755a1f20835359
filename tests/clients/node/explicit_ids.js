// Node's mysql2 as a real client (tests/clients_node.rs, issue 12): generated
// and explicit ids through `query` (text protocol; mysql2 formats the
// placeholders into the SQL itself) and `execute` (binary protocol; a JS
// number is bound as a DOUBLE, a fractional one always), into table `t`
// (id BIGINT PRIMARY KEY, k VARCHAR NOT NULL UNIQUE). Prints one line of JSON:
// every step's insertId, affectedRows, whether it generates an id,
// LAST_INSERT_ID() afterwards, the largest id stored before it, its error if
// any, and the rows stored.
//
//   node explicit_ids.js HOST PORT USER PASSWORD DATABASE
'use strict';

const mysql = require('mysql2/promise');

// [name, method, sql, params, generated]: `generated` names the rows whose id
// the server (AUTO_INCREMENT) or idgate chooses; every other row's id is the
// one the application wrote, converted as MariaDB converts it.
const STEPS = [
  ['q_gen1', 'query', 'INSERT INTO t (k) VALUES (?)', ['q1'], ['q1']],
  ['q_lit', 'query', 'INSERT INTO t (id, k) VALUES (1000, ?)', ['q2'], []],
  ['q_gen2', 'query', 'INSERT INTO t (k) VALUES (?)', ['q3'], ['q3']],
  // mysql2 formats a number into the text: 1500.5 is an exact literal
  // (rounds half away from zero: 1501).
  ['q_num', 'query', 'INSERT INTO t (id, k) VALUES (?, ?)', [1500.5, 'q4'], []],
  ['q_gen3', 'query', 'INSERT INTO t (id, k) VALUES (?, ?)', [null, 'q5'], ['q5']],
  ['e_null', 'execute', 'INSERT INTO t (id, k) VALUES (?, ?)', [null, 'e1'], ['e1']],
  ['e_int', 'execute', 'INSERT INTO t (id, k) VALUES (?, ?)', [2000, 'e2'], []],
  ['e_gen1', 'execute', 'INSERT INTO t (id, k) VALUES (?, ?)', [null, 'e3'], ['e3']],
  // A DOUBLE whatever the parameter hints say: rint, half to even.
  ['e_half_even', 'execute', 'INSERT INTO t (id, k) VALUES (?, ?)', [3000.5, 'e4'], []],
  ['e_gen2', 'execute', 'INSERT INTO t (k) VALUES (?)', ['e5'], ['e5']],
  ['e_half_up', 'execute', 'INSERT INTO t (id, k) VALUES (?, ?)', [4001.5, 'e6'], []],
  ['e_zero', 'execute', 'INSERT INTO t (id, k) VALUES (?, ?)', [0, 'e7'], ['e7']],
  ['e_string', 'execute', 'INSERT INTO t (id, k) VALUES (?, ?)', [' 4500', 'e8'], []],
  ['e_gen3', 'execute', 'INSERT INTO t (k) VALUES (?)', ['e9'], ['e9']],
  ['e_rows', 'execute', 'INSERT INTO t (id, k) VALUES (?, ?), (?, ?)', [5000.25, 'm1', null, 'm2'], ['m2']],
  ['e_gen4', 'execute', 'INSERT INTO t (k) VALUES (?)', ['m3'], ['m3']],
  ['e_upsert', 'execute',
    'INSERT INTO t (id, k) VALUES (?, ?) ON DUPLICATE KEY UPDATE id = ?', [null, 'm3', 6000.0], []],
  ['e_gen5', 'execute', 'INSERT INTO t (k) VALUES (?)', ['m4'], ['m4']],
  ['e_update', 'execute', 'UPDATE t SET id = ? WHERE k = ?', [7000, 'q1'], []],
  ['e_gen6', 'execute', 'INSERT INTO t (k) VALUES (?)', ['m5'], ['m5']],
  ['q_gen4', 'query', 'INSERT INTO t (k) VALUES (?), (?)', ['m6', 'm7'], ['m6', 'm7']],
];

async function main() {
  const [host, port, user, password, database] = process.argv.slice(2);
  const conn = await mysql.createConnection({
    host,
    port: Number(port),
    user,
    password,
    database,
    supportBigNumbers: true,
    bigNumberStrings: true,
    // The driver's 10 s default: a loaded CI machine must not fail the test.
    connectTimeout: 60000,
  });
  const steps = [];
  const generated = [];
  for (const [name, method, sql, params, gen] of STEPS) {
    generated.push(...gen);
    const [[{ m }]] = await conn.query('SELECT COALESCE(MAX(id), 0) AS m FROM t');
    const step = { name, method, generates: gen.length > 0, maxBefore: String(m) };
    try {
      const [res] = await conn[method](sql, params);
      step.insertId = String(res.insertId);
      step.affectedRows = res.affectedRows;
    } catch (e) {
      step.error = { errno: e.errno, message: e.message };
    }
    const [[{ l }]] = await conn.query('SELECT LAST_INSERT_ID() AS l');
    step.lastInsertId = String(l);
    steps.push(step);
  }
  const [rows] = await conn.query('SELECT k, id FROM t ORDER BY k');
  await conn.end();
  console.log(
    JSON.stringify({
      steps,
      generated,
      rows: rows.map((r) => [r.k, String(r.id)]),
    })
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
