package ferrybinlog

import (
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/ferrydev/ferry/ferrystore/ferrymysql"
)

func mustParse(t *testing.T, rawURL string) *mysql.Config {
	t.Helper()
	mc, err := ferrymysql.ParseURL(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return mc
}
