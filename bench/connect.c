/* Connection setup rate with the C client (libmariadb), as issue #19
 * measures it: N processes each loop connect + one SELECT + close for S
 * seconds against one target; prints one line
 *     <label> <connections per second> libmariadb <errors>
 * like bench/connect.py, for scripts/bench-connect.sh --client c.
 *
 *   connect HOST PORT USER PASSWORD PROCS SECONDS LABEL [SQL]
 *
 * Built by scripts/bench-connect.sh: cc -O2 bench/connect.c $(mariadb_config --cflags --libs)
 */
#include <mysql.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: connect HOST PORT USER PASSWORD PROCS SECONDS LABEL [SQL]\n");
        return 2;
    }
    const char *host = argv[1], *user = argv[3], *password = argv[4], *label = argv[7];
    unsigned port = (unsigned)atoi(argv[2]);
    int procs = atoi(argv[5]);
    double seconds = atof(argv[6]);
    const char *sql = argc > 8 ? argv[8] : "SELECT 1";
    int fds[2];
    if (pipe(fds) != 0) { perror("pipe"); return 1; }
    double start = now(), deadline = start + seconds;
    for (int p = 0; p < procs; p++) {
        if (fork() == 0) {
            close(fds[0]);
            long n = 0, errors = 0;
            mysql_library_init(0, NULL, NULL);
            while (now() < deadline) {
                MYSQL *c = mysql_init(NULL);
                unsigned timeout = 10;
                mysql_optionsv(c, MYSQL_OPT_CONNECT_TIMEOUT, &timeout);
                if (!mysql_real_connect(c, host, user, password, NULL, port, NULL, 0)) {
                    errors++;
                    mysql_close(c);
                    continue;
                }
                if (mysql_query(c, sql) != 0) {
                    errors++;
                } else {
                    MYSQL_RES *r = mysql_store_result(c);
                    if (r) mysql_free_result(r);
                    n++;
                }
                mysql_close(c);
            }
            char line[128];
            int len = snprintf(line, sizeof line, "%ld %ld\n", n, errors);
            if (write(fds[1], line, (size_t)len) != len) _exit(1);
            _exit(0);
        }
    }
    close(fds[1]);
    long total = 0, errors = 0;
    FILE *in = fdopen(fds[0], "r");
    long n, e;
    while (in && fscanf(in, "%ld %ld", &n, &e) == 2) {
        total += n;
        errors += e;
    }
    while (wait(NULL) > 0) {}
    double elapsed = now() - start;
    printf("%s %.1f libmariadb %ld\n", label, total / elapsed, errors);
    return 0;
}
