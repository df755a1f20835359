<?php
// Connection setup rate with PHP's mysqlnd (mysqli), the way a PHP
// application connects per request: N processes each loop connect + one
// SELECT + close for S seconds against one target; prints one line
//     <label> <connections per second> mysqlnd <errors>
// like bench/connect.c, for scripts/bench-connect.sh --client php.
//
//   php connect.php HOST PORT USER PASSWORD PROCS SECONDS LABEL [SQL]

[$host, $port, $user, $password, $procs, $seconds, $label] = array_slice($argv, 1, 7);
$sql = $argv[8] ?? 'SELECT 1';
$procs = (int)$procs;
$seconds = (float)$seconds;
mysqli_report(MYSQLI_REPORT_OFF);
$start = hrtime(true) / 1e9;
$deadline = $start + $seconds;
$pipes = [];
for ($p = 0; $p < $procs; $p++) {
    $pair = stream_socket_pair(STREAM_PF_UNIX, STREAM_SOCK_STREAM, STREAM_IPPROTO_IP);
    $pid = pcntl_fork();
    if ($pid === 0) {
        fclose($pair[0]);
        $n = 0;
        $errors = 0;
        while (hrtime(true) / 1e9 < $deadline) {
            $c = mysqli_init();
            $c->options(MYSQLI_OPT_CONNECT_TIMEOUT, 10);
            if (!@$c->real_connect($host, $user, $password, null, (int)$port)) {
                $errors++;
                continue;
            }
            $r = $c->query($sql);
            if ($r === false) {
                $errors++;
            } else {
                if ($r instanceof mysqli_result) {
                    $r->free();
                }
                $n++;
            }
            $c->close();
        }
        fwrite($pair[1], "$n $errors\n");
        exit(0);
    }
    fclose($pair[1]);
    $pipes[] = $pair[0];
}
$total = 0;
$errors = 0;
foreach ($pipes as $pipe) {
    $line = trim((string)stream_get_contents($pipe));
    if ($line !== '') {
        [$n, $e] = array_map('intval', explode(' ', $line));
        $total += $n;
        $errors += $e;
    }
}
while (pcntl_wait($status) > 0) {
}
$elapsed = hrtime(true) / 1e9 - $start;
printf("%s %.1f mysqlnd %d\n", $label, $total / $elapsed, $errors);
