package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/open"
)

// inboxTables are the table flags of the commands that read a consumer's
// inbox. They are shared settings: inbox.marker_table, ... in the config
// file, whichever command reads them.
type inboxTables struct {
	markers, conflicts, versions string
}

func (t *inboxTables) flags(fl *pflag.FlagSet, markersOnly bool) {
	fl.StringVar(&t.markers, "marker-table", "consumed_operation", "inbox marker table (ferry's InboxConfig.MarkerTable)")
	bindShared(fl, "marker-table", "FERRY_MARKER_TABLE", "inbox.marker_table")
	if markersOnly {
		return
	}
	fl.StringVar(&t.conflicts, "conflict-table", "ferry_conflict", "inbox conflict table")
	bindShared(fl, "conflict-table", "FERRY_CONFLICT_TABLE", "inbox.conflict_table")
	fl.StringVar(&t.versions, "version-table", "ferry_version", "inbox version table (order guard)")
	bindShared(fl, "version-table", "FERRY_VERSION_TABLE", "inbox.version_table")
}

// open opens the inbox tables of the consumer database at --database-url.
func (t *inboxTables) open(cmd *cobra.Command, g *globals) (ferrystore.InboxStore, error) {
	return open.InboxStore(cmd.Context(), g.databaseURL, &open.InboxConfig{MarkerTable: t.markers,
		ConflictTable: t.conflicts, VersionTable: t.versions})
}

// Decisions a person may record on a conflict (ferrystore.Resolution).
var decisions = []string{"keep-stored", "applied-manually", "ignored"}

func newConflicts(g *globals) *cobra.Command {
	tables := &inboxTables{}
	cmd := &cobra.Command{
		Use:   "conflicts",
		Short: "List, inspect and resolve inbox conflicts: one business key delivered with other fields",
		Long: `A conflict is a delivery whose business key (order:42:paid) a consumer had
already applied with other defining fields (another user, another amount). The
inbox did not apply it and did not count it as a success: it recorded both
versions here and parked the delivery. Usually the producer has a bug (two
operations under one key), or the data was corrected upstream after the
first event.

  ferry conflicts list                     the open ones, newest first
  ferry conflicts show ID                  both versions side by side
  ferry conflicts resolve ID --decision keep-stored --note "why"

Resolving records a decision, who took it and when. It NEVER applies the
incoming operation, never undoes the stored one and never changes business
data: fix the data by hand first if it needs fixing, then record
"applied-manually" with what you did in --note.

--database-url is the consumer's database: the one holding its inbox tables
(--marker-table, --conflict-table, --version-table; inbox.* in the config file).`,
	}
	tables.flags(cmd.PersistentFlags(), false)
	cmd.AddCommand(newConflictsList(g, tables), newConflictsShow(g, tables), newConflictsResolve(g, tables))
	return cmd
}

// conflictJSON is a conflict as the commands print it; its form is stable.
type conflictJSON struct {
	ID          int64        `json:"id"`
	Consumer    string       `json:"consumer"`
	Key         string       `json:"key"`
	Status      string       `json:"status"`
	Occurrences int64        `json:"occurrences"`
	FirstSeen   time.Time    `json:"first_seen"`
	LastSeen    time.Time    `json:"last_seen"`
	Stored      versionJSON  `json:"stored"`
	Incoming    versionJSON  `json:"incoming"`
	Differing   []string     `json:"differing_fields"`
	Resolution  *resolutionJ `json:"resolution,omitempty"`
	// Marker is the consumer's marker for the key now (show only): the
	// applied operation, or absent when retention purged it.
	Marker *markerJSON `json:"marker,omitempty"`
}

type versionJSON struct {
	EventID     string          `json:"event_id"`
	Fields      json.RawMessage `json:"fields"`
	Fingerprint string          `json:"fingerprint"`
}

type resolutionJ struct {
	Decision   string    `json:"decision"`
	By         string    `json:"by"`
	Note       string    `json:"note"`
	ResolvedAt time.Time `json:"resolved_at"`
}

type markerJSON struct {
	Found     bool            `json:"found"`
	EventID   string          `json:"event_id,omitempty"`
	Fields    json.RawMessage `json:"fields,omitempty"`
	Outcome   string          `json:"outcome,omitempty"`
	CreatedAt *time.Time      `json:"created_at,omitempty"`
}

func conflictToJSON(c ferrystore.Conflict) conflictJSON {
	j := conflictJSON{ID: c.ID, Consumer: c.Consumer, Key: c.Key, Status: c.Status, Occurrences: c.Occurrences,
		FirstSeen: c.FirstSeen, LastSeen: c.LastSeen,
		Stored:    versionJSON{EventID: c.StoredEventID, Fields: rawJSON(c.StoredFields), Fingerprint: c.StoredFingerprint},
		Incoming:  versionJSON{EventID: c.IncomingEventID, Fields: rawJSON(c.IncomingFields), Fingerprint: c.IncomingFingerprint},
		Differing: differingFields(c.StoredFields, c.IncomingFields)}
	if c.Status != "OPEN" {
		j.Resolution = &resolutionJ{Decision: c.Resolution.Decision, By: c.Resolution.By, Note: c.Resolution.Note,
			ResolvedAt: c.ResolvedAt}
	}
	return j
}

// rawJSON returns b when it is valid JSON, else b as a JSON string.
func rawJSON(b []byte) json.RawMessage {
	if json.Valid(b) {
		return json.RawMessage(bytes.TrimSpace(b))
	}
	s, _ := json.Marshal(string(b))
	return s
}

// fieldsOf decodes an operation's canonical fields: an object's members
// as compact JSON, or nil when the fields are not an object.
func fieldsOf(b []byte) map[string]string {
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if dec.Decode(&m) != nil || m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		var c bytes.Buffer
		if json.Compact(&c, v) != nil {
			c.Reset()
			c.Write(v)
		}
		out[k] = c.String()
	}
	return out
}

// differingFields names the fields whose values differ; "(fields)" when
// the two are not both objects.
func differingFields(stored, incoming []byte) []string {
	a, b := fieldsOf(stored), fieldsOf(incoming)
	if a == nil || b == nil {
		if bytes.Equal(bytes.TrimSpace(stored), bytes.TrimSpace(incoming)) {
			return []string{}
		}
		return []string{"(fields)"}
	}
	out := []string{}
	for _, k := range unionKeys(a, b) {
		va, oka := a[k]
		vb, okb := b[k]
		if oka != okb || va != vb {
			out = append(out, k)
		}
	}
	return out
}

func unionKeys(a, b map[string]string) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func newConflictsList(g *globals, tables *inboxTables) *cobra.Command {
	var (
		consumer string
		all      bool
		limit    int
		check    bool
		jsonOut  bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List open conflicts, newest first (--all: resolved ones too)",
		Long: `Lists the open conflicts of every consumer (or of --consumer), newest first,
with the fields that differ between the applied operation and the refused one.
--all lists resolved conflicts too, with their decision. With --check, the exit
code is 4 when an open conflict is listed: usable as a cron or probe check.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > ferrystore.MaxListLimit-1 {
				return usageError{fmt.Errorf("--limit must be within 1..%d", ferrystore.MaxListLimit-1)}
			}
			s, err := tables.open(cmd, g)
			if err != nil {
				return err
			}
			defer s.Close()
			cs, err := s.Conflicts(cmd.Context(), ferrystore.ConflictFilter{Consumer: consumer, All: all, Limit: limit + 1})
			if err != nil {
				return err
			}
			more := len(cs) > limit
			if more {
				cs = cs[:limit]
			}
			open := 0
			list := make([]conflictJSON, len(cs))
			for i, c := range cs {
				list[i] = conflictToJSON(c)
				if c.Status == "OPEN" {
					open++
				}
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				if err := writeJSON(out, struct {
					Conflicts []conflictJSON `json:"conflicts"`
					More      bool           `json:"more"`
				}{list, more}); err != nil {
					return err
				}
			} else {
				printConflictList(out, list, all, more, limit)
			}
			if check && open > 0 {
				return exitError{exitFindings, fmt.Errorf("%d open conflicts", open)}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&consumer, "consumer", "", "only this consumer's conflicts (points-award)")
	fl.BoolVar(&all, "all", false, "resolved conflicts too")
	fl.IntVar(&limit, "limit", 50, fmt.Sprintf("most conflicts to list (at most %d)", ferrystore.MaxListLimit-1))
	fl.BoolVar(&check, "check", false, "exit 4 when an open conflict is listed")
	fl.BoolVar(&jsonOut, "json", false, "print JSON")
	return cmd
}

func printConflictList(w io.Writer, list []conflictJSON, all, more bool, limit int) {
	if len(list) == 0 {
		if all {
			fmt.Fprintln(w, "no conflict recorded")
		} else {
			fmt.Fprintln(w, "no open conflict")
		}
		return
	}
	rows := make([]string, len(list))
	for i, c := range list {
		status := c.Status
		if c.Resolution != nil {
			status += " (" + c.Resolution.Decision + ")"
		}
		rows[i] = fmt.Sprintf("%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s", c.ID, c.Consumer, c.Key, status, c.Occurrences,
			c.LastSeen.UTC().Format(time.RFC3339), orDash(strings.Join(c.Differing, ",")), c.Stored.EventID, c.Incoming.EventID)
	}
	table(w, "", "ID\tCONSUMER\tKEY\tSTATUS\tSEEN\tLAST SEEN\tDIFFERS\tSTORED EVENT\tINCOMING EVENT", rows)
	if more {
		fmt.Fprintf(w, "(more than %d: filter with --consumer or raise --limit)\n", limit)
	}
	fmt.Fprintln(w, "\ninspect one: ferry conflicts show ID")
}

func parseConflictIDs(args []string) ([]int64, error) {
	if len(args) > ferrystore.MaxListLimit {
		return nil, usageError{fmt.Errorf("at most %d ids at once", ferrystore.MaxListLimit)}
	}
	ids := make([]int64, len(args))
	for i, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id < 1 {
			return nil, usageError{fmt.Errorf("conflict id %q: want a positive number (ferry conflicts list shows them)", a)}
		}
		ids[i] = id
	}
	return ids, nil
}

func newConflictsShow(g *globals, tables *inboxTables) *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "show ID...",
		Short: "Show conflicts in full: the applied and the refused operation side by side",
		Long: `Shows each conflict with both versions of the operation side by side: the
stored one (its effect was applied, by the event named) and the incoming one
(refused, its delivery parked), field by field, with the fields that differ
marked; how often it was delivered and when; the consumer's marker for the key
as it is now; and the decision, if one was recorded. Exit code 5 if an id is not
found.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseConflictIDs(args)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			s, err := tables.open(cmd, g)
			if err != nil {
				return err
			}
			defer s.Close()
			var (
				shown   []conflictJSON
				missing []string
			)
			for _, id := range ids {
				c, err := s.GetConflict(ctx, id)
				if errors.Is(err, ferrytype.ErrNotFound) {
					missing = append(missing, strconv.FormatInt(id, 10))
					continue
				}
				if err != nil {
					return err
				}
				j := conflictToJSON(c)
				j.Marker = &markerJSON{}
				m, err := s.GetMarker(ctx, c.Consumer, c.Key)
				switch {
				case errors.Is(err, ferrytype.ErrNotFound):
				case err != nil:
					return err
				default:
					created := m.CreatedAt
					j.Marker = &markerJSON{Found: true, EventID: m.EventID, Fields: rawJSON(m.Fields), Outcome: m.Outcome,
						CreatedAt: &created}
				}
				shown = append(shown, j)
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				if shown == nil {
					shown = []conflictJSON{}
				}
				if err := writeJSON(out, shown); err != nil {
					return err
				}
			} else {
				for i := range shown {
					printConflict(out, &shown[i])
					fmt.Fprintln(out)
				}
			}
			if len(missing) > 0 {
				return exitError{exitNoMatch, fmt.Errorf("no conflict with id %s", strings.Join(missing, ", "))}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON")
	return cmd
}

func printConflict(w io.Writer, c *conflictJSON) {
	fmt.Fprintf(w, "conflict %d: consumer %s, key %s, %s\n", c.ID, c.Consumer, c.Key, c.Status)
	fmt.Fprintf(w, "  delivered %d times with these fields, first %s, last %s\n", c.Occurrences,
		c.FirstSeen.UTC().Format(time.RFC3339), c.LastSeen.UTC().Format(time.RFC3339))
	fmt.Fprintln(w)
	rows := []string{"event\t" + c.Stored.EventID + "\t" + c.Incoming.EventID + "\t"}
	a, b := fieldsOf(c.Stored.Fields), fieldsOf(c.Incoming.Fields)
	if a != nil && b != nil {
		for _, k := range unionKeys(a, b) {
			va, oka := a[k]
			vb, okb := b[k]
			mark := ""
			if oka != okb || va != vb {
				mark = "differs"
			}
			rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%s", k, orAbsent(va, oka), orAbsent(vb, okb), mark))
		}
	} else {
		mark := ""
		if len(c.Differing) > 0 {
			mark = "differs"
		}
		rows = append(rows, fmt.Sprintf("fields\t%s\t%s\t%s", oneLine(string(c.Stored.Fields), 60),
			oneLine(string(c.Incoming.Fields), 60), mark))
	}
	rows = append(rows, fmt.Sprintf("fingerprint\t%s…\t%s…\t", prefix(c.Stored.Fingerprint, 12), prefix(c.Incoming.Fingerprint, 12)))
	table(w, "  ", "FIELD\tSTORED (applied)\tINCOMING (refused, parked)\t", rows)
	fmt.Fprintln(w)
	switch m := c.Marker; {
	case m == nil:
	case !m.Found:
		fmt.Fprintln(w, "  marker now:  none (purged by retention): a redelivery of either version would be applied")
	case m.EventID == c.Stored.EventID:
		fmt.Fprintf(w, "  marker now:  event %s, %s at %s: the stored version stands\n", m.EventID, m.Outcome,
			m.CreatedAt.UTC().Format(time.RFC3339))
	default:
		fmt.Fprintf(w, "  marker now:  event %s, %s at %s, fields %s\n", m.EventID, m.Outcome,
			m.CreatedAt.UTC().Format(time.RFC3339), oneLine(string(m.Fields), 80))
	}
	if r := c.Resolution; r != nil {
		fmt.Fprintf(w, "  resolved:    %s by %s at %s\n", r.Decision, r.By, r.ResolvedAt.UTC().Format(time.RFC3339))
		if r.Note != "" {
			fmt.Fprintf(w, "  note:        %s\n", r.Note)
		}
		return
	}
	fmt.Fprintln(w, "  The stored operation's effect was applied; the incoming one was not (its delivery was parked).")
	fmt.Fprintln(w, "  Decide, fix the business data by hand if it needs it, then record the decision (a record only:")
	fmt.Fprintln(w, "  nothing is applied, no data changes):")
	fmt.Fprintf(w, "    ferry conflicts resolve %d --decision keep-stored|applied-manually|ignored --note \"...\"\n", c.ID)
}

func orAbsent(v string, ok bool) string {
	if !ok {
		return "(absent)"
	}
	return oneLine(v, 60)
}

func prefix(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func newConflictsResolve(g *globals, tables *inboxTables) *cobra.Command {
	var (
		decision string
		note     string
		jsonOut  bool
	)
	cmd := &cobra.Command{
		Use:   "resolve ID... --decision keep-stored|applied-manually|ignored --note TEXT",
		Short: "Record a person's decision on open conflicts; applies nothing, changes no business data",
		Long: `Marks open conflicts RESOLVED with your decision, your note, your user and host
name, and the time. Decisions:

  keep-stored       the applied operation was right; the refused one is dropped
  applied-manually  someone corrected the business data by hand (say what in --note)
  ignored           not a real problem (a test event, a known duplicate)

Resolving NEVER applies the incoming operation, never reverses the stored one,
and never changes business data or markers: it records what a person decided.
A resolved conflict that is delivered again with the same fields is not
reopened (it stays resolved; its occurrences still count).

Exit code 5 when an id is not an open conflict (unknown, or already resolved).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := parseConflictIDs(args)
			if err != nil {
				return err
			}
			valid := false
			for _, d := range decisions {
				valid = valid || d == decision
			}
			if !valid {
				return usageError{fmt.Errorf("--decision %q: want %s", decision, strings.Join(decisions, ", "))}
			}
			if strings.TrimSpace(note) == "" {
				return usageError{fmt.Errorf("--note is required: it is kept with the decision")}
			}
			ctx := cmd.Context()
			s, err := tables.open(cmd, g)
			if err != nil {
				return err
			}
			defer s.Close()
			r := ferrystore.Resolution{Decision: decision, By: truncate(ferryadmin.LocalActor(), 128), Note: note}
			var (
				resolved []int64
				problems []string
			)
			for _, id := range ids {
				err := s.ResolveConflict(ctx, id, r)
				switch {
				case err == nil:
					resolved = append(resolved, id)
					continue
				case !errors.Is(err, ferrytype.ErrNotFound):
					return fmt.Errorf("resolve conflict %d (resolved so far: %v): %w", id, resolved, err)
				}
				// Not open: say why, from the row as it is now.
				c, gerr := s.GetConflict(ctx, id)
				switch {
				case errors.Is(gerr, ferrytype.ErrNotFound):
					problems = append(problems, fmt.Sprintf("conflict %d does not exist", id))
				case gerr != nil:
					return gerr
				default:
					problems = append(problems, fmt.Sprintf("conflict %d was already resolved: %s by %s at %s", id,
						c.Resolution.Decision, c.Resolution.By, c.ResolvedAt.UTC().Format(time.RFC3339)))
				}
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				if err := writeJSON(out, struct {
					Decision string   `json:"decision"`
					By       string   `json:"by"`
					Note     string   `json:"note"`
					Resolved []int64  `json:"resolved"`
					Problems []string `json:"problems"`
				}{r.Decision, r.By, r.Note, append([]int64{}, resolved...), append([]string{}, problems...)}); err != nil {
					return err
				}
			} else {
				for _, id := range resolved {
					fmt.Fprintf(out, "conflict %d resolved: %s, by %s (a record only: no effect applied, no data changed)\n",
						id, r.Decision, r.By)
				}
			}
			if len(problems) > 0 {
				return exitError{exitNoMatch, errors.New(strings.Join(problems, "; "))}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&decision, "decision", "", "keep-stored, applied-manually or ignored (required)")
	fl.StringVar(&note, "note", "", "why, and for applied-manually what was done (required; stored with the decision)")
	fl.BoolVar(&jsonOut, "json", false, "print JSON")
	return cmd
}

// truncate shortens s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
