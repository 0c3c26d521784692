package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/internal/open"
)

// inboxTables are the table flags of the commands that read a consumer's
// inbox. They are shared settings: inbox.marker_table, ... in the config
// file, whichever command reads them.
type inboxTables struct {
	markers, conflicts, versions, keys string
}

func (t *inboxTables) flags(fl *pflag.FlagSet, markersOnly bool) {
	fl.StringVar(&t.markers, "marker-table", "consumed_operation", "inbox marker table (ferry's InboxConfig.MarkerTable)")
	bindShared(fl, "marker-table", "FERRY_MARKER_TABLE", "inbox.marker_table")
	fl.StringVar(&t.keys, "key-table", "ferry_idempotency_key", "idempotency key table (ferryhttp; InboxConfig.KeyTable)")
	bindShared(fl, "key-table", "FERRY_KEY_TABLE", "inbox.key_table")
	if markersOnly {
		return
	}
	fl.StringVar(&t.conflicts, "conflict-table", "ferry_conflict", "inbox conflict table")
	bindShared(fl, "conflict-table", "FERRY_CONFLICT_TABLE", "inbox.conflict_table")
	fl.StringVar(&t.versions, "version-table", "ferry_version", "inbox version table (order guard)")
	bindShared(fl, "version-table", "FERRY_VERSION_TABLE", "inbox.version_table")
}

// open opens the inbox tables of the consumer database at --database-url.
func (t *inboxTables) open(cmd *cobra.Command, g *globals) (open.Inbox, error) {
	return open.InboxStore(cmd.Context(), g.databaseURL, &open.InboxConfig{MarkerTable: t.markers,
		ConflictTable: t.conflicts, VersionTable: t.versions, KeyTable: t.keys})
}

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
			list, err := ferryadmin.ListConflicts(cmd.Context(), s, ferryadmin.ConflictListOptions{Consumer: consumer,
				All: all, Limit: limit})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				if err := writeJSON(out, list); err != nil {
					return err
				}
			} else {
				printConflictList(out, list.Conflicts, all, list.More, limit)
			}
			if open := list.Open(); check && open > 0 {
				return exitError{exitFindings, errors.New(plural(open, "open conflict"))}
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

func printConflictList(w io.Writer, list []ferryadmin.Conflict, all, more bool, limit int) {
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
			found, err := ferryadmin.GetConflicts(ctx, s, ids)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				if err := writeJSON(out, found.Conflicts); err != nil {
					return err
				}
			} else {
				for i := range found.Conflicts {
					printConflict(out, &found.Conflicts[i])
					fmt.Fprintln(out)
				}
			}
			if len(found.Missing) > 0 {
				missing := make([]string, len(found.Missing))
				for i, id := range found.Missing {
					missing[i] = strconv.FormatInt(id, 10)
				}
				return exitError{exitNoMatch, fmt.Errorf("no conflict with id %s", strings.Join(missing, ", "))}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print JSON")
	return cmd
}

func printConflict(w io.Writer, c *ferryadmin.Conflict) {
	fmt.Fprintf(w, "conflict %d: consumer %s, key %s, %s\n", c.ID, c.Consumer, c.Key, c.Status)
	fmt.Fprintf(w, "  delivered %s with these fields, first %s, last %s\n", plural(c.Occurrences, "time"),
		c.FirstSeen.UTC().Format(time.RFC3339), c.LastSeen.UTC().Format(time.RFC3339))
	fmt.Fprintln(w)
	rows := []string{"event\t" + c.Stored.EventID + "\t" + c.Incoming.EventID + "\t"}
	if fields, ok := c.CompareFields(); ok {
		for _, f := range fields {
			mark := ""
			if f.Differs {
				mark = "differs"
			}
			rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%s", f.Name, orAbsent(f.Stored, f.InStored),
				orAbsent(f.Incoming, f.InIncoming), mark))
		}
	} else {
		mark := ""
		if len(c.Differing) > 0 {
			mark = "differs"
		}
		rows = append(rows, fmt.Sprintf("fields\t%s\t%s\t%s", ferryadmin.OneLine(string(c.Stored.Fields), 60),
			ferryadmin.OneLine(string(c.Incoming.Fields), 60), mark))
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
			m.CreatedAt.UTC().Format(time.RFC3339), ferryadmin.OneLine(string(m.Fields), 80))
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
	return ferryadmin.OneLine(v, 60)
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
			for _, d := range ferryadmin.Decisions {
				valid = valid || d == decision
			}
			if !valid {
				return usageError{fmt.Errorf("--decision %q: want %s", decision, strings.Join(ferryadmin.Decisions, ", "))}
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
			res, err := ferryadmin.ResolveConflicts(ctx, s, ids, decision, note, ferryadmin.LocalActor())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if jsonOut {
				if err := writeJSON(out, res); err != nil {
					return err
				}
			} else {
				for _, id := range res.Resolved {
					fmt.Fprintf(out, "conflict %d resolved: %s, by %s (a record only: no effect applied, no data changed)\n",
						id, res.Decision, res.By)
				}
				if len(res.Resolved) > 0 {
					fmt.Fprintln(out, "the refused deliveries stay parked; on RabbitMQ, remove them with "+
						"ferry parked drop --resolved-conflicts --queue QUEUE (and this --database-url; --dry-run first)")
				}
			}
			if len(res.Problems) > 0 {
				return exitError{exitNoMatch, errors.New(strings.Join(res.Problems, "; "))}
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
