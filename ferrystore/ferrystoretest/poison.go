package ferrystoretest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// rawRow is an outbox row written by hand, as a hand-written INSERT or an
// older writer leaves it.
type rawRow struct {
	name string
	// cols and vals are the columns the row sets and their values, as
	// text; event_id is added.
	cols, vals []string
	// reason is what last_error must contain when the row is malformed;
	// empty for a row that is delivered as it is.
	reason string
	// dialects the row can be written in; empty means every dialect.
	dialects []string
	// unchecked writes the row with the database's CHECK constraints
	// off, as a session that disabled them would.
	unchecked bool
}

// poisonRows is every kind of hand-written row the suite writes next to
// well-formed events: those that must end DEAD with their reason, and
// those that are delivered as they are. Each row's first value is its
// aggregate id.
func poisonRows() []rawRow {
	seed := func(more ...string) []string {
		return append([]string{"aggregate_id", "event_type", "payload"}, more...)
	}
	vals := func(v ...string) []string { return v }
	return []rawRow{
		// Malformed: DEAD at once, with the reason.
		{name: "HeadersObjectOfNumbers", cols: seed("headers"), vals: vals("p", "T", "{}", `{"retry":1}`),
			reason: "malformed row: headers: json: cannot unmarshal number"},
		{name: "HeadersArray", cols: seed("headers"), vals: vals("p", "T", "{}", "[1,2]"),
			reason: "malformed row: headers: json: cannot unmarshal array"},
		{name: "HeadersString", cols: seed("headers"), vals: vals("p", "T", "{}", `"x"`),
			reason: "malformed row: headers: json: cannot unmarshal string"},
		{name: "HeadersNested", cols: seed("headers"), vals: vals("p", "T", "{}", `{"a":{"b":"c"}}`),
			reason: "malformed row: headers: json: cannot unmarshal object"},
		{name: "HeaderNameEmpty", cols: seed("headers"), vals: vals("p", "T", "{}", `{"":"x"}`),
			reason: "malformed row: headers: a header name is empty"},
		{name: "HeadersNotJSON", cols: seed("headers"), vals: vals("p", "T", "{}", "{oops"),
			reason: "malformed row: headers: invalid character", dialects: []string{"mysql", "sqlite", "memory"}, unchecked: true},
		{name: "PayloadNotJSON", cols: seed(), vals: vals("p", "T", "not json"),
			reason: "malformed row: payload: not valid JSON", dialects: []string{"mysql", "sqlite", "memory"}, unchecked: true},
		{name: "PayloadEmpty", cols: seed(), vals: vals("p", "T", ""),
			reason: "malformed row: payload: empty", dialects: []string{"mysql", "sqlite", "memory"}, unchecked: true},
		{name: "EventTypeEmpty", cols: seed(), vals: vals("p", "", "{}"),
			reason: "malformed row: event_type: empty"},
		{name: "SequenceNotAnInteger", cols: seed("aggregate_seq"), vals: vals("p", "T", "{}", "abc"),
			reason: `malformed row: aggregate_seq: "abc" is not an integer`, dialects: []string{"sqlite"}},
		{name: "CreatedAtNotATime", cols: seed("created_at"), vals: vals("p", "T", "{}", "yesterday"),
			reason: `malformed row: created_at: cannot parse time "yesterday"`, dialects: []string{"sqlite"}},
		// Well-formed: delivered as they are.
		{name: "SeedColumnsOnly", cols: seed(), vals: vals("p", "T", `{"a":1}`)},
		{name: "HeadersNull", cols: seed("headers"), vals: vals("p", "T", "{}", "null")},
		{name: "HeadersOfStrings", cols: seed("headers"), vals: vals("p", "T", "{}", `{"k":"v"}`)},
		{name: "PayloadScalar", cols: seed(), vals: vals("p", "T", "42")},
	}
}

// insertRaw writes r with id into s's table, by hand.
func (b *bundle[TTx]) insertRaw(t *testing.T, r rawRow, id string) {
	t.Helper()
	write := rawWriter(b.h)
	require.NotNil(t, write, "the case needs Harness.InsertRaw or Harness.Exec")
	write(b.ctx, t, b.store, RawRow{ID: id, Columns: r.cols, Values: r.vals, Unchecked: r.unchecked})
}

// insertSQL is the INSERT that writes r into s's table: its values are SQL
// text literals.
func insertSQL(s ferrystore.Store, r RawRow) string {
	dialect := s.Dialect()
	table := `"` + s.Table() + `"`
	if dialect == "mysql" {
		table = "`" + s.Table() + "`"
	}
	vals := make([]string, len(r.Values))
	for i, v := range r.Values {
		vals[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
	}
	q := fmt.Sprintf("INSERT INTO %s (event_id, %s) VALUES ('%s', %s)", table, strings.Join(r.Columns, ", "), r.ID,
		strings.Join(vals, ", "))
	if r.Unchecked {
		switch dialect {
		case "mysql": // MariaDB's JSON is LONGTEXT with a CHECK (json_valid)
			q = "SET STATEMENT check_constraint_checks = 0 FOR " + q
		case "sqlite": // one Exec, one connection
			q = "PRAGMA ignore_check_constraints = ON; " + q + "; PRAGMA ignore_check_constraints = OFF"
		}
	}
	return q
}

// exercisePoison checks that rows the relay cannot turn into messages
// never fail a claim and never stay in a batch: each ends DEAD at once
// with its reason (ferrytype.TransitionMalformed), every other row of the
// batch is claimed as usual, and operators can still read them.
func exercisePoison[TTx any](t *testing.T, h Harness[TTx]) {
	needs(t, rawWriter(h) != nil, "InsertRaw (nor Exec)", "the malformed rows are written by hand")
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("MalformedRowsEndDeadAndTheBatchIsClaimed/ordered=%v", ordered), func(t *testing.T) {
			b := setup(t, h)
			var good, bad []string
			want := map[string]string{}
			for i, r := range poisonRows() {
				if len(r.dialects) > 0 && !slices.Contains(r.dialects, b.store.Dialect()) {
					continue
				}
				// Each row has its own aggregate, so that none holds back
				// another in an ordered claim.
				id := fmt.Sprintf("raw-%02d-%s", i, r.name)
				r.vals = append([]string{id}, r.vals[1:]...)
				b.insertRaw(t, r, id)
				if r.reason == "" {
					good = append(good, id)
				} else {
					bad = append(bad, id)
					want[id] = r.reason
				}
				good = append(good, b.enqueue(t, ev("Good", fmt.Sprintf("g%d", i), `{"n":1}`))...)
			}
			require.NotEmpty(t, bad)

			reported := map[string]error{}
			token := "poison-" + b.store.Dialect()
			msgs, err := b.store.Claim(b.ctx, ferrystore.ClaimParams{Limit: 100, Token: token, Lease: time.Minute, Ordered: ordered,
				Malformed: func(id string, reason error) {
					require.NotContains(t, reported, id, "reported twice")
					reported[id] = reason
				}})
			require.NoError(t, err, "a malformed row must never fail the claim")
			require.ElementsMatch(t, good, ids(msgs), "every well-formed row is claimed, no malformed one")
			require.Len(t, reported, len(bad))
			for id, reason := range want {
				require.ErrorIs(t, reported[id], ferrytype.ErrMalformedRow, id)
				require.Contains(t, reported[id].Error(), reason, id)
				r := b.get(t, id)
				require.Equal(t, ferrytype.StatusDead, r.Status, id)
				require.Contains(t, r.LastError, reason, id)
				require.Empty(t, r.LeaseToken, id)
				require.NotEmpty(t, r.Malformed, id)
			}
			for _, m := range msgs {
				require.Equal(t, ferrytype.StatusSending, b.get(t, m.ID).Status)
				require.NotEmpty(t, m.Type)
			}
			n, err := b.store.MarkSent(b.ctx, token, ids(msgs))
			require.NoError(t, err)
			require.Equal(t, int64(len(good)), n)

			// Nothing is left to claim: a malformed row is never claimed
			// again.
			again, err := b.store.Claim(b.ctx, ferrystore.ClaimParams{Limit: 100, Token: token + "-2", Lease: time.Minute,
				Malformed: func(id string, _ error) { t.Errorf("%s reported again", id) }})
			require.NoError(t, err)
			require.Empty(t, again)

			// Operators list and read them.
			dead, err := b.admin(t).List(b.ctx, ferrystore.Filter{Statuses: []ferrytype.Status{ferrytype.StatusDead}, Limit: 100})
			require.NoError(t, err, "one malformed row must never fail a listing")
			var listed []string
			for _, r := range dead {
				listed = append(listed, r.ID)
				require.Contains(t, r.LastError, want[r.ID])
			}
			require.ElementsMatch(t, bad, listed)
			n, err = b.admin(t).Discard(b.ctx, bad, "malformed")
			require.NoError(t, err, "a malformed row can be discarded")
			require.Equal(t, int64(len(bad)), n)
		})
	}

	t.Run("AdminReadsMalformedRowsBeforeAnyClaim", func(t *testing.T) {
		b := setup(t, h)
		r := poisonRows()[0]
		b.insertRaw(t, r, "raw-headers")
		row := b.get(t, "raw-headers")
		require.Equal(t, ferrytype.StatusNew, row.Status)
		require.Contains(t, row.Malformed, r.reason)
		require.JSONEq(t, `{"retry":1}`, row.RawHeaders)
		require.Nil(t, row.Headers)
		require.Equal(t, "T", row.Type)
		rows, err := b.admin(t).List(b.ctx, ferrystore.Filter{Statuses: []ferrytype.Status{ferrytype.StatusNew}, Limit: 10})
		require.NoError(t, err)
		require.Len(t, rows, 1)
	})
}
