package ferryadmin

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ferrydev/ferry/ferrystore"
	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/nilness"
)

// Event is an outbox row as the admin API reports it. Its JSON form is
// the one ferry's commands print and is stable.
type Event struct {
	ID            string           `json:"id"`
	Status        ferrytype.Status `json:"status"`
	Type          string           `json:"type"`
	AggregateType string           `json:"aggregate_type"`
	AggregateID   string           `json:"aggregate_id"`
	Sequence      int64            `json:"sequence"`
	Destination   string           `json:"destination"`
	Exchange      string           `json:"exchange,omitempty"`
	Attempts      int              `json:"attempts"`
	CreatedAt     time.Time        `json:"created_at"`
	AvailableAt   time.Time        `json:"available_at"`
	SentAt        *time.Time       `json:"sent_at,omitempty"`
	LastError     string           `json:"last_error,omitempty"`
	// ErrorClass is the class of LastError (ErrorClass), as recorded
	// with it or, for a row that failed before migration 0004, computed.
	ErrorClass string `json:"error_class,omitempty"`
	// RevivedAt is when a person last retried the event out of DEAD.
	RevivedAt     *time.Time        `json:"revived_at,omitempty"`
	DiscardedAt   *time.Time        `json:"discarded_at,omitempty"`
	DiscardReason string            `json:"discard_reason,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	// Payload is the event's payload when it is valid JSON; absent from
	// listings, which report no headers and no payload.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Malformed says why the relay cannot publish the row (a hand-written
	// row: see ferrytype.ErrMalformedRow); empty for a well-formed row.
	Malformed string `json:"malformed,omitempty"`
	// RawHeaders and RawPayload are the headers and the payload as stored
	// when they do not decode (headers not a JSON object of strings, a
	// payload not JSON); like Headers and Payload, absent from listings.
	RawHeaders string `json:"raw_headers,omitempty"`
	RawPayload string `json:"raw_payload,omitempty"`
}

// EventOf converts an outbox row. With full, the headers and the payload
// are included; listings leave them out.
func EventOf(r ferrystore.Row, full bool) Event {
	e := Event{ID: r.ID, Status: r.Status, Type: r.Type, AggregateType: r.AggregateType, AggregateID: r.AggregateID,
		Sequence: r.Sequence, Destination: r.Route(), Exchange: r.Exchange, Attempts: r.Attempt, CreatedAt: r.CreatedAt,
		AvailableAt: r.AvailableAt, LastError: r.LastError, DiscardReason: r.DiscardReason, Malformed: r.Malformed}
	if !r.SentAt.IsZero() {
		e.SentAt = &r.SentAt
	}
	if !r.DiscardedAt.IsZero() {
		e.DiscardedAt = &r.DiscardedAt
	}
	if !r.RevivedAt.IsZero() {
		e.RevivedAt = &r.RevivedAt
	}
	if e.ErrorClass = r.ErrorClass; e.ErrorClass == "" && r.LastError != "" {
		e.ErrorClass = ErrorClass(r.LastError)
	}
	if full {
		e.Headers, e.RawHeaders = r.Headers, r.RawHeaders
		if json.Valid(r.Payload) {
			e.Payload = r.Payload
		} else {
			e.RawPayload = string(r.Payload)
		}
	}
	return e
}

// Aggregate names the event's aggregate and position, "order:42#3", or ""
// when the event has none.
func (e *Event) Aggregate() string {
	if e.AggregateID == "" {
		return ""
	}
	return fmt.Sprintf("%s:%s#%d", e.AggregateType, e.AggregateID, e.Sequence)
}

func eventsOf(rows []ferrystore.Row, full bool) []Event {
	out := make([]Event, len(rows))
	for i, r := range rows {
		out[i] = EventOf(r, full)
	}
	return out
}

// needStore refuses a nil store, plain or typed (a nil *ferrymysql.Store
// in the interface), with an error rather than a panic in a driver call.
func needStore(fn string, s any) error {
	if nilness.Nil(s) {
		return invalid("%s: the store is nil", fn)
	}
	return nil
}

// invalid returns an error wrapping ferrytype.ErrInvalidConfig.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ferrytype.ErrInvalidConfig}, args...)...)
}

// Plural counts n of noun for people: "1 event", "2 events", "0 events".
// Of a phrase, the last word changes ("3 matching DEAD events"): it takes
// "es" after s, x, z, ch and sh ("2 batches"), and a final y after a
// consonant becomes "ies" ("2 entries"); "time" is "times".
func Plural[N ~int | ~int32 | ~int64](n N, noun string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, noun)
	}
	return fmt.Sprintf("%d %s", n, plural(noun))
}

// plural is the plural of noun, the last word of a phrase.
func plural(noun string) string {
	switch {
	case noun == "":
		return noun
	case strings.HasSuffix(noun, "s"), strings.HasSuffix(noun, "x"), strings.HasSuffix(noun, "z"),
		strings.HasSuffix(noun, "ch"), strings.HasSuffix(noun, "sh"):
		return noun + "es"
	case strings.HasSuffix(noun, "y") && len(noun) > 1 && !strings.ContainsRune("aeiou", rune(noun[len(noun)-2])):
		return noun[:len(noun)-1] + "ies"
	}
	return noun + "s"
}

// FormatAge formats an age for people: milliseconds under a second,
// tenths under a minute, seconds above; "0s" for zero or less.
func FormatAge(d time.Duration) string {
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

// OneLine folds s to one line, its runs of white space made one space,
// and, when it is longer than n bytes, keeps its first n-1 bytes (fewer
// rather than cut a UTF-8 character in two) and adds "…".
func OneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	cut := max(n-1, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
