package ferryadmin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
)

// Decisions a person may record on a conflict with ResolveConflicts.
var Decisions = []string{DecisionKeepStored, DecisionAppliedManually, DecisionIgnored}

// The decisions of ResolveConflicts.
const (
	// DecisionKeepStored: the applied operation was right; the refused one
	// is dropped.
	DecisionKeepStored = "keep-stored"
	// DecisionAppliedManually: someone corrected the business data by hand
	// (the note says what).
	DecisionAppliedManually = "applied-manually"
	// DecisionIgnored: not a real problem (a test event, a known duplicate).
	DecisionIgnored = "ignored"
)

// Conflict is an inbox conflict as ferry's commands and console show it:
// the stored conflict (a delivery whose business key a consumer had
// already applied with other defining fields), the fields that differ,
// and the consumer's marker for the key now. Its JSON form is the one
// ferry's commands print and is stable: ferrystore.Conflict's fields,
// then differing_fields and marker.
type Conflict struct {
	ferrystore.Conflict
	// Differing names the fields whose values differ, "(fields)" when the
	// two are not both JSON objects.
	Differing []string `json:"differing_fields"`
	// Marker is the consumer's marker for the key now, set by
	// GetConflicts only.
	Marker *CurrentMarker `json:"marker,omitempty"`
}

// CurrentMarker is what a consumer's marker for a key is now: the
// operation it applied, or none (purged by retention). Its JSON form is
// found, then the marker's fields when there is one.
type CurrentMarker struct {
	Found bool `json:"found"`
	// Marker is nil when Found is false.
	*ferrystore.Marker
}

// ConflictOf converts a stored conflict: defining fields that are not
// valid JSON (written by hand) become a JSON string, so that the
// conflict always encodes.
func ConflictOf(c ferrystore.Conflict) Conflict {
	j := Conflict{Conflict: c, Differing: differingFields(c.Stored.Fields, c.Incoming.Fields)}
	j.Stored.Fields, j.Incoming.Fields = rawJSON(c.Stored.Fields), rawJSON(c.Incoming.Fields)
	return j
}

// FieldComparison is one defining field of both versions of a conflict.
type FieldComparison struct {
	Name string `json:"name"`
	// Stored and Incoming are the values as compact JSON; InStored and
	// InIncoming say whether the field is present at all.
	Stored     string `json:"stored"`
	Incoming   string `json:"incoming"`
	InStored   bool   `json:"in_stored"`
	InIncoming bool   `json:"in_incoming"`
	Differs    bool   `json:"differs"`
}

// CompareFields lines both versions' fields up by name, sorted. ok is
// false when the two are not both JSON objects: then compare Stored.Fields
// and Incoming.Fields as a whole.
func (c *Conflict) CompareFields() (fields []FieldComparison, ok bool) {
	a, b := fieldsOf(c.Stored.Fields), fieldsOf(c.Incoming.Fields)
	if a == nil || b == nil {
		return nil, false
	}
	for _, k := range unionKeys(a, b) {
		va, oka := a[k]
		vb, okb := b[k]
		fields = append(fields, FieldComparison{Name: k, Stored: va, Incoming: vb, InStored: oka, InIncoming: okb,
			Differs: oka != okb || va != vb})
	}
	return fields, true
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

// DefaultConflictListLimit is the default of ConflictListOptions.Limit.
const DefaultConflictListLimit = 50

// ConflictListOptions selects the conflicts ListConflicts lists.
type ConflictListOptions struct {
	// Consumer keeps one consumer's conflicts; empty: every consumer's.
	Consumer string
	// All lists resolved conflicts too.
	All bool
	// Limit is the most conflicts listed, 1 to ferrystore.MaxListLimit-1.
	// Default (zero) DefaultConflictListLimit.
	Limit int
}

// ConflictList is a page of conflicts, newest first.
type ConflictList struct {
	Conflicts []Conflict `json:"conflicts"`
	// More reports that more conflicts match than were listed.
	More bool `json:"more"`
}

// Open counts the open conflicts listed.
func (l *ConflictList) Open() int {
	n := 0
	for _, c := range l.Conflicts {
		if c.Status == "OPEN" {
			n++
		}
	}
	return n
}

// ListConflicts lists the conflicts of the inbox s, newest first: the
// open ones, or all with opts.All.
func ListConflicts(ctx context.Context, s ferrystore.InboxStore, opts ConflictListOptions) (ConflictList, error) {
	if err := needStore("ListConflicts", s); err != nil {
		return ConflictList{}, err
	}
	if opts.Limit == 0 {
		opts.Limit = DefaultConflictListLimit
	}
	if opts.Limit < 1 || opts.Limit > ferrystore.MaxListLimit-1 {
		return ConflictList{}, invalid("ConflictListOptions.Limit %d must be within 1..%d", opts.Limit, ferrystore.MaxListLimit-1)
	}
	cs, err := s.Conflicts(ctx, ferrystore.ConflictFilter{Consumer: opts.Consumer, All: opts.All, Limit: opts.Limit + 1})
	if err != nil {
		return ConflictList{}, err
	}
	l := ConflictList{More: len(cs) > opts.Limit}
	if l.More {
		cs = cs[:opts.Limit]
	}
	l.Conflicts = make([]Conflict, len(cs))
	for i, c := range cs {
		l.Conflicts[i] = ConflictOf(c)
	}
	return l, nil
}

// ConflictsFound is what GetConflicts found.
type ConflictsFound struct {
	// Conflicts are those found, in the order asked, each with the
	// consumer's marker for its key as it is now.
	Conflicts []Conflict `json:"conflicts"`
	// Missing are the ids without a conflict.
	Missing []int64 `json:"missing"`
}

// GetConflicts reads conflicts in full, at most ferrystore.MaxListLimit
// ids at once, each with the consumer's marker for the key as it is now.
// An unknown id is reported in Missing, not as an error.
func GetConflicts(ctx context.Context, s ferrystore.InboxStore, ids []int64) (ConflictsFound, error) {
	if err := needStore("GetConflicts", s); err != nil {
		return ConflictsFound{}, err
	}
	found := ConflictsFound{Conflicts: []Conflict{}, Missing: []int64{}}
	if len(ids) > ferrystore.MaxListLimit {
		return found, invalid("%d ids, at most %d at once", len(ids), ferrystore.MaxListLimit)
	}
	for _, id := range ids {
		c, err := s.GetConflict(ctx, id)
		if errors.Is(err, ferrytype.ErrNotFound) {
			found.Missing = append(found.Missing, id)
			continue
		}
		if err != nil {
			return found, err
		}
		j := ConflictOf(c)
		j.Marker = &CurrentMarker{}
		m, err := s.GetMarker(ctx, c.Consumer, c.Key)
		switch {
		case errors.Is(err, ferrytype.ErrNotFound):
		case err != nil:
			return found, err
		default:
			m.Fields = rawJSON(m.Fields)
			j.Marker = &CurrentMarker{Found: true, Marker: &m}
		}
		found.Conflicts = append(found.Conflicts, j)
	}
	return found, nil
}

// ResolveResult is what ResolveConflicts recorded.
type ResolveResult struct {
	Decision string `json:"decision"`
	By       string `json:"by"`
	Note     string `json:"note"`
	// Resolved are the conflicts this call resolved.
	Resolved []int64 `json:"resolved"`
	// Problems say, for each id not resolved, why: it does not exist, or
	// it was already resolved (by whom, when, how).
	Problems []string `json:"problems"`
}

// ResolveConflicts records a person's decision (one of Decisions), note
// and name (by, at most 128 bytes are kept) on open conflicts. Each is
// one statement conditional on the conflict still being OPEN: a resolved
// one keeps its first decision and is reported in Problems. It NEVER
// applies the incoming operation, never undoes the stored one, and never
// changes business data or markers. On an error, the result says what
// was resolved before it.
func ResolveConflicts(ctx context.Context, s ferrystore.InboxStore, ids []int64, decision, note, by string) (ResolveResult, error) {
	if err := needStore("ResolveConflicts", s); err != nil {
		return ResolveResult{}, err
	}
	r := ferrystore.Resolution{Decision: decision, By: truncate(by, 128), Note: note}
	res := ResolveResult{Decision: r.Decision, By: r.By, Note: r.Note, Resolved: []int64{}, Problems: []string{}}
	valid := false
	for _, d := range Decisions {
		valid = valid || d == decision
	}
	switch {
	case !valid:
		return res, invalid("decision %q: want %s", decision, strings.Join(Decisions, ", "))
	case strings.TrimSpace(note) == "":
		return res, invalid("a note is required: it is kept with the decision")
	case strings.TrimSpace(by) == "":
		return res, invalid("the person deciding is required: it is kept with the decision")
	case len(ids) > ferrystore.MaxListLimit:
		return res, invalid("%d ids, at most %d at once", len(ids), ferrystore.MaxListLimit)
	}
	for _, id := range ids {
		err := s.ResolveConflict(ctx, id, r)
		switch {
		case err == nil:
			res.Resolved = append(res.Resolved, id)
			continue
		case !errors.Is(err, ferrytype.ErrNotFound):
			return res, fmt.Errorf("resolve conflict %d (resolved so far: %v): %w", id, res.Resolved, err)
		}
		// Not open: say why, from the row as it is now.
		c, gerr := s.GetConflict(ctx, id)
		switch {
		case errors.Is(gerr, ferrytype.ErrNotFound):
			res.Problems = append(res.Problems, fmt.Sprintf("conflict %d does not exist", id))
		case gerr != nil:
			return res, gerr
		case c.Resolution == nil:
			res.Problems = append(res.Problems, fmt.Sprintf("conflict %d is %s, not open", id, c.Status))
		default:
			res.Problems = append(res.Problems, fmt.Sprintf("conflict %d was already resolved: %s by %s at %s", id,
				c.Resolution.Decision, c.Resolution.By, c.Resolution.ResolvedAt.UTC().Format(time.RFC3339)))
		}
	}
	return res, nil
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
