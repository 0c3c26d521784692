package sqlstore

import "testing"

func TestRebind(t *testing.T) {
	q := "UPDATE t SET a = ? WHERE b = ? AND c IN (?, ?)"
	if got := Rebind("mysql", q); got != q {
		t.Errorf("mysql: got %q, want it unchanged", got)
	}
	if got, want := Rebind("postgres", q), "UPDATE t SET a = $1 WHERE b = $2 AND c IN ($3, $4)"; got != want {
		t.Errorf("postgres: got %q, want %q", got, want)
	}
}
