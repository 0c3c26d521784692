package shop_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/examples/shop"
)

func TestRunRoleUsageErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"NoRole", nil, "name a role"},
		{"UnknownRole", []string{"warp"}, `unknown role "warp"`},
		{"UnknownFlag", []string{"points", "--no-such-flag"}, "flag provided but not defined"},
		{"BadCrashPoint", []string{"orders", "--crash-at", "order.after-commit:zero"}, "--crash-at"},
		{"RelayBadCrashPoint", []string{"relay", "--crash-at", ":3"}, "no point name"},
		{"StrayArgument", []string{"sms", "extra"}, "unexpected arguments"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := shop.RunRole(context.Background(), c.args, &out, &errOut)
			require.ErrorIs(t, err, shop.ErrUsage)
			require.ErrorContains(t, err, c.want)
		})
	}
}
