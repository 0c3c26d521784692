package ferryadmin_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/internal/testsvc"
)

// A group's bulk action walks the group through the DEAD index (its
// destination, class and type, in created_at order), not the settled
// index filtered row by row: on MariaDB, whose optimizer chose the latter
// at a million DEAD events, the walk read every DEAD row of the table from
// its cursor on for each page, many times the table over a run (122 s for
// 600,000 events at the default buffer pool, 38 s through the DEAD
// index). Each listing the action ran is explained.
func TestGroupActionWalksTheDeadIndex(t *testing.T) {
	t.Parallel()
	for _, kind := range testsvc.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			n := 20_000
			if kind == "sqlite" {
				n = 5_000
			}
			classified := make([]testsvc.DeadKind, len(deadMix))
			for i, k := range deadMix {
				k.Unclassified = false
				classified[i] = k
			}
			testsvc.InsertDead(t, b.st, n, classified...)
			testsvc.Analyze(t, b.st)
			w := watch(t, b)
			// A class without a quote: MariaDB leaves the quotes of a
			// condition unescaped in its JSON plan.
			class := ferryadmin.ErrorClass(strings.NewReplacer("{n}", "1", "{m}", "1").Replace(deadMix[8].Error))
			group := ferryadmin.DeadFilter{Destination: "orders.paid", ErrorClass: class}
			dry, err := ferryadmin.RetryDead(b.ctx, w, ferryadmin.BulkOptions{Filter: group, DryRun: true})
			require.NoError(t, err)
			require.Positive(t, dry.Matched)
			group.DiedBy = dry.At
			res, err := ferryadmin.RetryDead(b.ctx, w, ferryadmin.BulkOptions{Filter: group})
			require.NoError(t, err)
			require.Equal(t, dry.Matched, res.Changed)
			require.True(t, res.Complete)

			w.rec.mu.Lock()
			defer w.rec.mu.Unlock()
			walked := 0
			for _, s := range w.rec.log {
				if !strings.HasPrefix(s.query, "SELECT event_id, created_at FROM") {
					continue // the walk's pages: ids and their place
				}
				walked++
				plan := w.plan(t, s)
				switch kind {
				case "mysql":
					access := objectsOf(t, plan, "table_name")
					require.Len(t, access, 1, "%s\n%s", s.query, plan)
					require.Equal(t, "idx_dead", access[0]["key"], "%s\n%s", s.query, plan)
					require.Subset(t, access[0]["used_key_parts"], []any{"settled_status", "route", "error_class", "event_type"},
						"%s\n%s", s.query, plan)
				case "postgres":
					require.Contains(t, plan, `"Index Name": "`+b.st.Driver.Table()+`_dead_idx"`, "%s\n%s", s.query, plan)
				case "sqlite":
					require.Contains(t, plan, "USING INDEX "+b.st.Driver.Table()+"_dead_idx (status=? AND <expr>=? AND error_class=? AND event_type=?",
						"%s\n%s", s.query, plan)
				}
			}
			require.Positive(t, walked, "the walk's listings were recorded")
		})
	}
}
