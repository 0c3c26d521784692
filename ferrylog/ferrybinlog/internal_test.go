package ferrybinlog

import (
	"errors"
	"fmt"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

func TestSettingsProblem(t *testing.T) {
	t.Parallel()
	good := map[string]string{"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL"}
	require.NoError(t, settingsProblem(good))
	for _, c := range []struct {
		name, value, says string
	}{
		{"log_bin", "OFF", "log_bin=OFF"},
		{"log_bin", "", "log_bin=unknown"},
		{"binlog_format", "STATEMENT", "binlog_format is STATEMENT"},
		{"binlog_format", "MIXED", "binlog_format=ROW"},
		{"binlog_row_image", "MINIMAL", "binlog_row_image is MINIMAL"},
		{"binlog_row_image", "NOBLOB", "binlog_row_image=FULL"},
	} {
		vars := map[string]string{}
		for k, v := range good {
			vars[k] = v
		}
		vars[c.name] = c.value
		err := settingsProblem(vars)
		require.ErrorIs(t, err, ferrystore.ErrLogSetup, "%s=%s", c.name, c.value)
		require.ErrorContains(t, err, c.says)
	}
}

func TestGrantsProblem(t *testing.T) {
	t.Parallel()
	for _, ok := range [][]string{
		{"GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION"},
		{"GRANT USAGE ON *.* TO `u`@`%`", "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `u`@`%`"},
		{"GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `u`@`%`"},
		{"GRANT REPLICATION REPLICA ON *.* TO `u`@`%`"},
	} {
		require.NoError(t, grantsProblem("u", ok), "%q", ok)
	}
	for _, bad := range [][]string{
		nil,
		{"GRANT USAGE ON *.* TO `u`@`%`", "GRANT SELECT ON `test`.* TO `u`@`%`"},
		{"GRANT ALL PRIVILEGES ON `test`.* TO `u`@`%`"},
	} {
		err := grantsProblem("u", bad)
		require.ErrorIs(t, err, ferrystore.ErrLogSetup, "%q", bad)
		require.ErrorContains(t, err, "REPLICATION SLAVE")
	}
}

func TestPositions(t *testing.T) {
	t.Parallel()
	p, err := parsePos("binlog.000003:1234")
	require.NoError(t, err)
	require.Equal(t, pos{file: "binlog.000003", off: 1234}, p)
	require.Equal(t, ferrystore.LogPosition("binlog.000003:1234"), p.logPosition())
	p, err = parsePos("host:with:colons-bin.000001:4")
	require.NoError(t, err)
	require.Equal(t, pos{file: "host:with:colons-bin.000001", off: 4}, p)
	for _, bad := range []ferrystore.LogPosition{"", "binlog.000003", ":12", "binlog.000003:", "binlog.000003:x", "binlog.000003:99999999999"} {
		_, err := parsePos(bad)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, "%q", bad)
	}
	require.Equal(t, ferrystore.LogPosition(""), pos{}.logPosition())
}

func TestLagBytes(t *testing.T) {
	t.Parallel()
	files := []binlogFile{{"b.000001", 1000}, {"b.000002", 2000}, {"b.000003", 500}}
	at := func(f string, o uint32) pos { return pos{file: f, off: o} }
	require.Equal(t, int64(300), lagBytes(at("b.000003", 200), at("b.000003", 500), files))
	require.Equal(t, int64(0), lagBytes(at("b.000003", 500), at("b.000003", 200), files), "never negative")
	require.Equal(t, int64(1000-400+2000+300), lagBytes(at("b.000001", 400), at("b.000003", 300), files))
	require.Equal(t, int64(2000-2000+300), lagBytes(at("b.000002", 2000), at("b.000003", 300), files))
	require.Equal(t, int64(1000+2000+300), lagBytes(at("b.000000", 400), at("b.000003", 300), files), "purged: from the first file")
	require.Equal(t, int64(0), lagBytes(at("b.000003", 10), at("b.000002", 300), files), "checkpoint after the head")
}

func TestReadErrorGap(t *testing.T) {
	t.Parallel()
	f := &Feed{rawURL: "mysql://u:hunter22@h:3306/db", mc: nil}
	f.mc = mustParse(t, f.rawURL)
	gone := &gomysql.MyError{Code: 1236, Message: "Could not find first log file name in binary log index file"}
	err := f.readError(fmt.Errorf("read: %w", gone), pos{file: "b.000001", off: 4})
	require.ErrorIs(t, err, ferrystore.ErrLogGap)
	require.ErrorContains(t, err, "b.000001:4")
	err = f.readError(errors.New("ERROR 1236 (HY000): Could not find first log file name"), pos{file: "b.000001", off: 4})
	require.ErrorIs(t, err, ferrystore.ErrLogGap)
	err = f.readError(errors.New("dial mysql://u:hunter22@h:3306/db: connection refused"), pos{file: "b.000001", off: 4})
	require.NotErrorIs(t, err, ferrystore.ErrLogGap)
	require.NotContains(t, err.Error(), "hunter22")
}

func TestValues(t *testing.T) {
	t.Parallel()
	ix := colIndex{id: 0, status: 2, attempts: 1}
	ev, ok := rowEvent([]any{"e1", int32(3), "NEW"}, ix)
	require.True(t, ok)
	require.Equal(t, ferrystore.LogEvent{ID: "e1", Attempts: 3}, ev)
	ev, ok = rowEvent([]any{[]byte("e2"), int64(0), []byte("NEW")}, ix)
	require.True(t, ok)
	require.Equal(t, ferrystore.LogEvent{ID: "e2"}, ev)
	_, ok = rowEvent([]any{"e3", int32(0), "SENT"}, ix)
	require.False(t, ok)
	_, ok = rowEvent([]any{nil, int32(0), "NEW"}, ix)
	require.False(t, ok)
	_, ok = rowEvent([]any{"e4"}, ix)
	require.False(t, ok, "short row")
}

func TestTLSVerifiesTheServersName(t *testing.T) {
	t.Parallel()
	f, err := New(&Config{URL: "mysql://u@db.example:3306/x?tls=true"})
	require.NoError(t, err)
	defer f.Close()
	require.Equal(t, "db.example", f.mc.TLS.ServerName)
}
