<?php
// PHP's mysqlnd as a real client (tests/clients_php.rs): PDO, with emulated
// prepares (the text protocol) and with server-side ones
// (COM_STMT_PREPARE/EXECUTE), and mysqli, insert generated and explicit ids
// into table `t` (id BIGINT PRIMARY KEY, k VARCHAR NOT NULL UNIQUE). Prints
// one line of JSON: every step's insert id as the driver reports it,
// LAST_INSERT_ID() before and after it, the largest id stored before it,
// the rows it generated ids for, and the rows stored.
//
//   php ids.php HOST PORT USER PASSWORD DATABASE

[$host, $port, $user, $password, $db] = array_slice($argv, 1);
mysqli_report(MYSQLI_REPORT_ERROR | MYSQLI_REPORT_STRICT);
$dsn = "mysql:host=$host;port=$port;dbname=$db";
$pdo = new PDO($dsn, $user, $password, [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);
$server = new PDO($dsn, $user, $password, [
    PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
    PDO::ATTR_EMULATE_PREPARES => false,
]);
$my = new mysqli($host, $user, $password, $db, (int)$port);

// LAST_INSERT_ID() and the largest stored id, on the session that inserts.
$lid = [
    'pdo' => fn() => (string)$pdo->query('SELECT LAST_INSERT_ID()')->fetchColumn(),
    'server' => fn() => (string)$server->query('SELECT LAST_INSERT_ID()')->fetchColumn(),
    'mysqli' => fn() => (string)$my->query('SELECT LAST_INSERT_ID()')->fetch_row()[0],
];
$max = fn() => (string)($pdo->query('SELECT COALESCE(MAX(id), 0) FROM t')->fetchColumn());

// A text statement through PDO (errors throw); the insert id PDO reports.
$exec = function (string $sql) use ($pdo) {
    $pdo->exec($sql);
    return $pdo->lastInsertId();
};

// [name, session, run (returns the driver's insert id), rows generated]
$steps = [
    ['pdo_gen', 'pdo', fn() => $exec("INSERT INTO t (k) VALUES ('a1')"), ['a1']],
    ['pdo_lit', 'pdo', fn() => $exec("INSERT INTO t (id, k) VALUES (1000, 'a2')"), []],
    ['pdo_multi', 'pdo', fn() => $exec("INSERT INTO t (k) VALUES ('a3'), ('a4')"), ['a3', 'a4']],
    ['pdo_emulated_null', 'pdo', function () use ($pdo) {
        $s = $pdo->prepare('INSERT INTO t (id, k) VALUES (?, ?)');
        $s->execute([null, 'a5']);
        return $pdo->lastInsertId();
    }, ['a5']],
    ['server_null', 'server', function () use ($server) {
        $s = $server->prepare('INSERT INTO t (id, k) VALUES (?, ?)');
        $s->execute([null, 'b1']);
        return $server->lastInsertId();
    }, ['b1']],
    ['server_lit', 'server', function () use ($server) {
        $s = $server->prepare('INSERT INTO t (id, k) VALUES (?, ?)');
        $s->execute([2000, 'b2']);
        return $server->lastInsertId();
    }, []],
    ['server_gen', 'server', function () use ($server) {
        $s = $server->prepare('INSERT INTO t (k) VALUES (?)');
        $s->execute(['b3']);
        return $server->lastInsertId();
    }, ['b3']],
    ['mysqli_gen', 'mysqli', function () use ($my) {
        $my->query("INSERT INTO t (k) VALUES ('c1')");
        return (string)$my->insert_id;
    }, ['c1']],
    ['mysqli_stmt_null', 'mysqli', function () use ($my) {
        $s = $my->prepare('INSERT INTO t (id, k) VALUES (?, ?)');
        $id = null;
        $k = 'c2';
        $s->bind_param('is', $id, $k);
        $s->execute();
        return (string)$s->insert_id;
    }, ['c2']],
    ['mysqli_lit', 'mysqli', function () use ($my) {
        $my->query("INSERT INTO t (id, k) VALUES (3000, 'c3')");
        return (string)$my->insert_id;
    }, []],
];

$out = ['steps' => [], 'rows' => []];
foreach ($steps as [$name, $session, $run, $generated]) {
    $before = $lid[$session]();
    $maxBefore = $max();
    $insertId = (string)$run();
    $out['steps'][] = [
        'name' => $name,
        'insertId' => $insertId,
        'lidBefore' => $before,
        'lidAfter' => $lid[$session](),
        'maxBefore' => $maxBefore,
        'generated' => $generated,
    ];
}
foreach ($pdo->query('SELECT k, id FROM t ORDER BY k') as $r) {
    $out['rows'][] = [$r['k'], (string)$r['id']];
}
echo json_encode($out), "\n";
