package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

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

// human formats an age for people: milliseconds under a second, tenths
// under a minute, seconds above.
func human(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// oneLine shortens s to one line of at most n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n-1] + "…"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
