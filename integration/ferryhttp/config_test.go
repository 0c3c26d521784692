package ferryhttp_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferryhttp"
	"github.com/ferrydev/ferry/ferrystore/ferrysqlite"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/testsvc"
)

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	ib, err := ferrysqlite.NewInbox(testsvc.SQLite(t), nil)
	require.NoError(t, err)
	_, err = ferryhttp.New[any](nil, nil)
	require.ErrorIs(t, err, ferrytype.ErrInvalidConfig)
	for name, cfg := range map[string]ferryhttp.Config{
		"negative lease":          {Lease: -time.Second},
		"negative retention":      {Retention: -time.Second},
		"retention below lease":   {Lease: time.Minute, Retention: time.Second},
		"key longer than column":  {MaxKeyLength: 256},
		"negative body bound":     {MaxBodyBytes: -1},
		"negative response bound": {MaxResponseBytes: -1},
		"negative retries":        {MaxRetries: -1},
	} {
		_, err := ferryhttp.New(ib, &cfg)
		require.ErrorIs(t, err, ferrytype.ErrInvalidConfig, name)
	}
	headers := []string{"content-type", "x-request-id"}
	_, err = ferryhttp.New(ib, &ferryhttp.Config{ReplayHeaders: headers})
	require.NoError(t, err)
	require.Equal(t, []string{"content-type", "x-request-id"}, headers, "the caller's slice is not changed")
}
