package migrate

import (
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

func TestStatementsKeepDollarQuotedBodies(t *testing.T) {
	sql := `-- a comment
CREATE TABLE a (x int);

CREATE FUNCTION f() RETURNS trigger AS $$
BEGIN
  PERFORM pg_notify('c', '');
  RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE INDEX i ON a (x);
`
	got := Statements(sql)
	require.Len(t, got, 3)
	require.Equal(t, "CREATE TABLE a (x int)", got[0])
	require.Contains(t, got[1], "PERFORM pg_notify('c', '');")
	require.Contains(t, got[1], "$$ LANGUAGE plpgsql")
	require.Equal(t, "CREATE INDEX i ON a (x)", got[2])
}

func TestListPairsAndOrders(t *testing.T) {
	fsys := fstest.MapFS{
		"0002_b.up.sql":   {Data: []byte("B")},
		"0001_a.up.sql":   {Data: []byte("A")},
		"0001_a.down.sql": {Data: []byte("-A")},
		"README":          {Data: []byte("x")},
	}
	migs, err := List(fsys)
	require.NoError(t, err)
	require.Equal(t, []Migration{{Version: 1, Name: "a", Up: "A", Down: "-A"}, {Version: 2, Name: "b", Up: "B"}}, migs)

	_, err = List(fstest.MapFS{"0003_c.down.sql": {Data: []byte("x")}})
	require.ErrorContains(t, err, "no up file")
	_, err = List(fstest.MapFS{"x_c.up.sql": {Data: []byte("x")}})
	require.ErrorContains(t, err, "bad version")
}

func TestRenderFailsOnMissingKey(t *testing.T) {
	src := fstest.MapFS{"m/0001_a.up.sql": {Data: []byte("CREATE TABLE {{.Table}} ();")}}
	_, err := Render(src, "m", map[string]string{})
	require.ErrorContains(t, err, "Table")
	out, err := Render(src, "m", map[string]string{"Table": `"t"`})
	require.NoError(t, err)
	migs, err := List(out)
	require.NoError(t, err)
	require.Equal(t, `CREATE TABLE "t" ();`, migs[0].Up)
}

func TestRenderedFilesAreAFileSystem(t *testing.T) {
	src := fstest.MapFS{
		"m/0001_a.up.sql":   {Data: []byte("CREATE TABLE {{.T}} (x int);")},
		"m/0001_a.down.sql": {Data: []byte("DROP TABLE {{.T}};")},
	}
	out, err := Render(src, "m", map[string]string{"T": "t1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := fstest.TestFS(out, "0001_a.up.sql", "0001_a.down.sql"); err != nil {
		t.Fatal(err)
	}
	b, err := fs.ReadFile(out, "0001_a.up.sql")
	if err != nil || string(b) != "CREATE TABLE t1 (x int);" {
		t.Fatalf("got %q, %v", b, err)
	}
}
