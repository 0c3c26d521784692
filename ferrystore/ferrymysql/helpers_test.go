package ferrymysql_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testenv"
)

var (
	mysqlOnce sync.Once
	mysqlDB   *sql.DB
	mysqlErr  error
)

// MySQL returns the package's pool on the test MariaDB/MySQL database,
// opened as an application opens it: its sessions keep the server's default
// isolation level (REPEATABLE READ), unlike the pool of ferrymysql.Open.
func MySQL(t testing.TB) *sql.DB {
	t.Helper()
	mysqlOnce.Do(func() {
		cfg, err := ferrymysql.ParseURL(testenv.URL(testenv.EnvMySQL))
		if err != nil {
			mysqlErr = err
			return
		}
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			mysqlErr = err
			return
		}
		db := sql.OpenDB(conn)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if mysqlErr = db.PingContext(ctx); mysqlErr != nil {
			db.Close()
			return
		}
		db.SetMaxOpenConns(64)
		mysqlDB = db
	})
	if mysqlErr != nil {
		testenv.Unavailable(t, "MariaDB/MySQL at "+ferrytype.RedactURL(testenv.URL(testenv.EnvMySQL)), mysqlErr)
	}
	return mysqlDB
}

// Store returns a migrated store on a fresh table of the test database,
// dropped when the test ends.
func Store(t testing.TB) ferrystore.Driver[*sql.Tx] {
	t.Helper()
	db := MySQL(t)
	s, err := ferrymysql.New(db, &ferrymysql.Config{Table: testenv.Name("ft_")})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Migrated(t, s, func(q string) error { _, err := db.Exec(q); return err })
	return s
}
