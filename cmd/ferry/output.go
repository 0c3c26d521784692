package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/ferrydev/ferry/ferryadmin"
	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/internal/open"
)

// openAdmin opens the outbox table of g for the operator's commands.
func openAdmin(ctx context.Context, g *globals) (ferrystore.Admin, error) {
	a, err := open.Store(ctx, g.databaseURL, g.table)
	if err != nil {
		return nil, err
	}
	if err := checkSchema(ctx, a, g.stderr); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// checkSchema fails with an error wrapping ferrytype.ErrSchemaOutdated
// (exit code exitSchema) that names the missing migrations when the outbox
// table of store is missing or behind, before a command trips over a
// missing column. A table migrated by a newer ferry, or by another tool,
// is worth a warning on w only.
func checkSchema(ctx context.Context, store ferrystore.Store, w io.Writer) error {
	s, err := store.CheckSchema(ctx)
	if err != nil {
		return err
	}
	if warning := s.Warning(); warning != "" && w != nil {
		fmt.Fprintln(w, "ferry: warning:", warning)
	}
	return s.Err()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes aligned columns; rows are tab-separated. Lines carry no
// trailing blanks when their last columns are empty.
func table(w io.Writer, indent string, header string, rows []string) {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, indent+header)
	for _, r := range rows {
		fmt.Fprintln(tw, indent+r)
	}
	tw.Flush()
	for _, line := range strings.SplitAfter(b.String(), "\n") {
		if line != "" {
			fmt.Fprintln(w, strings.TrimRight(line, " \n"))
		}
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// plural counts n of noun: "1 event", "2 events" (ferryadmin.Plural).
func plural[N ~int | ~int32 | ~int64](n N, noun string) string { return ferryadmin.Plural(n, noun) }
