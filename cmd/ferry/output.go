package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/internal/open"
)

// openAdmin opens the outbox table of g for the operator's commands.
func openAdmin(ctx context.Context, g *globals) (ferrystore.Admin, error) {
	store, err := open.Store(ctx, g.databaseURL, g.table)
	if err != nil {
		return nil, err
	}
	a, ok := store.(ferrystore.Admin)
	if !ok {
		store.Close()
		return nil, fmt.Errorf("the %s store does not support this command", store.Dialect())
	}
	return a, nil
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
