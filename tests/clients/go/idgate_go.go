// Go's database/sql with github.com/go-sql-driver/mysql (Debian's
// golang-github-go-sql-driver-mysql-dev) as a real client of idgate, run
// by tests/clients_go.rs. Each step prints one line: its name, then the
// value it read or "ERR <code>".
//
//	idgate_go HOST:PORT CA_PEM SCHEMA
//
// Logins: mysql_native_password, caching_sha2_password's full path by RSA
// (the driver asks for the server's public key) then its fast path, a
// wrong password, TLS verified against CA_PEM (tls=custom), a require_tls
// account with and without TLS. Then ids: an INSERT into the rule table
// SCHEMA.t with the text protocol and with a server-side prepared
// statement, each reporting LastInsertId, checked against the stored row
// and LAST_INSERT_ID() on the same connection.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-sql-driver/mysql"
)

func code(err error) string {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return fmt.Sprintf("ERR %d", me.Number)
	}
	return "ERR " + err.Error()
}

func dsn(user, pw, addr, db, tlsName string) string {
	c := mysql.NewConfig()
	c.User, c.Passwd, c.Net, c.Addr, c.DBName = user, pw, "tcp", addr, db
	c.TLSConfig = tlsName
	c.Timeout = 30 * time.Second
	return c.FormatDSN()
}

// login opens one connection and reads SELECT 40 + 2.
func login(name, user, pw, addr, tlsName string) {
	db, err := sql.Open("mysql", dsn(user, pw, addr, "", tlsName))
	if err != nil {
		fmt.Println(name, code(err))
		return
	}
	defer db.Close()
	var v int
	if err := db.QueryRow("SELECT 40 + 2").Scan(&v); err != nil {
		fmt.Println(name, code(err))
		return
	}
	fmt.Println(name, v)
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: idgate_go HOST:PORT CA_PEM SCHEMA")
		os.Exit(2)
	}
	addr, caFile, schema := os.Args[1], os.Args[2], os.Args[3]
	pem, err := os.ReadFile(caFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		fmt.Fprintln(os.Stderr, "no certificate in", caFile)
		os.Exit(2)
	}
	// The test bed's server certificate names 127.0.0.1 and localhost.
	if err := mysql.RegisterTLSConfig("custom", &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}

	login("native", "nat", "natpw", addr, "")
	login("sha2_rsa", "sha", "shapw", addr, "")
	login("sha2_fast", "sha", "shapw", addr, "")
	login("sha2_wrong", "sha", "nope", addr, "")
	login("sha2_tls_full", "sha_t", "shatpw", addr, "custom")
	login("require_tls_plain", "tlsonly", "tlspw", addr, "")
	login("require_tls_tls", "tlsonly", "tlspw", addr, "custom")

	db, err := sql.Open("mysql", dsn("app", "secret", addr, schema, "custom"))
	if err != nil {
		fmt.Println("ids", code(err))
		return
	}
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		fmt.Println("ids", code(err))
		return
	}
	defer conn.Close()
	// Text protocol: no arguments, the driver sends COM_QUERY.
	report := func(name string, res sql.Result, err error, k string) {
		if err != nil {
			fmt.Println(name, code(err))
			return
		}
		id, err := res.LastInsertId()
		if err != nil {
			fmt.Println(name, code(err))
			return
		}
		var stored, last int64
		if err := conn.QueryRowContext(ctx, "SELECT id FROM t WHERE k = '"+k+"'").Scan(&stored); err != nil {
			fmt.Println(name, code(err))
			return
		}
		if err := conn.QueryRowContext(ctx, "SELECT LAST_INSERT_ID()").Scan(&last); err != nil {
			fmt.Println(name, code(err))
			return
		}
		fmt.Println(name, id, stored, last)
	}
	res, err := conn.ExecContext(ctx, "INSERT INTO t (k) VALUES ('text')")
	report("insert_text", res, err, "text")
	// With an argument (interpolateParams is off): COM_STMT_PREPARE + EXECUTE.
	res, err = conn.ExecContext(ctx, "INSERT INTO t (k) VALUES (?)", "prepared")
	report("insert_prepared", res, err, "prepared")
}
