// Node's `mysql` (mysqljs) as a real client (tests/clients_node.rs): a driver
// that knows mysql_native_password and no other plugin (it answers an auth
// switch to caching_sha2_password with UNSUPPORTED_AUTH_METHOD). It logs in,
// inserts two rows into table `t` (id BIGINT PRIMARY KEY, k VARCHAR NOT NULL
// UNIQUE) without their id, and reads LAST_INSERT_ID() and the rows back.
// Prints one line of JSON: the login's error if any, each insert's insertId
// and LAST_INSERT_ID() after it, and the rows stored.
//
//   node native_only.js HOST PORT USER PASSWORD DATABASE
'use strict';

const mysql = require('mysql');

const [host, port, user, password, database] = process.argv.slice(2);
// Ids as strings: a BIGINT can be past 2^53.
const c = mysql.createConnection({
  host, port: Number(port), user, password, database,
  supportBigNumbers: true, bigNumberStrings: true,
});

const query = (sql, params) => new Promise((resolve, reject) =>
  c.query(sql, params, (err, res) => (err ? reject(err) : resolve(res))));

async function main() {
  try {
    await new Promise((resolve, reject) => c.connect((err) => (err ? reject(err) : resolve())));
  } catch (err) {
    console.log(JSON.stringify({ login: { code: err.code, message: err.message } }));
    return;
  }
  const steps = [];
  for (const k of ['a', 'b']) {
    const r = await query('INSERT INTO t (k) VALUES (?)', [k]);
    const [row] = await query('SELECT LAST_INSERT_ID() AS lid');
    steps.push({ k, insertId: String(r.insertId), lastInsertId: String(row.lid) });
  }
  const rows = (await query('SELECT k, id FROM t ORDER BY k')).map((r) => [r.k, String(r.id)]);
  console.log(JSON.stringify({ login: null, steps, rows }));
  await new Promise((resolve) => c.end(resolve));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
