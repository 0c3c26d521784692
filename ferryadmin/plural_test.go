package ferryadmin_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferryadmin"
)

func TestPlural(t *testing.T) {
	for _, c := range []struct {
		n    int64
		noun string
		want string
	}{
		{1, "event", "1 event"}, {0, "event", "0 events"}, {2, "matching DEAD event", "2 matching DEAD events"},
		{1, "batch", "1 batch"}, {3, "batch", "3 batches"}, {2, "time", "2 times"}, {2, "entry", "2 entries"},
		{2, "key", "2 keys"}, {2, "group", "2 groups"}, {2, "relay", "2 relays"},
	} {
		require.Equal(t, c.want, ferryadmin.Plural(c.n, c.noun))
	}
	require.Equal(t, "1 conflict", ferryadmin.Plural(1, "conflict"), "an untyped count")
}
