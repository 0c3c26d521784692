package sqlstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/token"
)

// messageColumns lists the columns DecodeMessage reads, in order: what a
// claim returns. rowColumns begins with the same columns.
const messageColumns = "event_id, aggregate_type, aggregate_id, aggregate_seq, event_type, payload, headers," +
	" destination, exchange, attempts, created_at"

// messageColumnNames are messageColumns one by one, for errors.
var messageColumnNames = [...]string{"event_id", "aggregate_type", "aggregate_id", "aggregate_seq", "event_type",
	"payload", "headers", "destination", "exchange", "attempts", "created_at"}

// numMessageColumns is the number of messageColumns.
const numMessageColumns = len(messageColumnNames)

// DecodeMessage turns the values of one row's messageColumns, as the
// driver returned them (scanned into *any), into a message.
//
// A row that EnqueueTx would have refused, or whose values are not of
// their column's kind, is malformed: the error wraps
// ferrytype.ErrMalformedRow and names the column ("malformed row: headers:
// json: cannot unmarshal number into Go value of type string"). Such a
// row can never be published, however often it is retried. The message is
// still filled with every value that could be read, for the operator's
// eyes. NULL in a text column other than event_id, event_type and payload
// reads as empty, in aggregate_seq and attempts as 0 (an event without a sequence
// takes no part in ordering, as with EnqueueOptions.SkipSequence), in
// created_at as the zero time. Values EnqueueTx accepts are delivered as
// they are, invalid UTF-8 included (a JSON decoder reads it as U+FFFD).
func DecodeMessage(v []any) (ferrytype.Message, error) {
	return decodeMessage(v, true)
}

// decodeMessage is DecodeMessage; checkPayload false skips the payload's
// JSON check, for a column whose type the database checks on every write.
func decodeMessage(v []any, checkPayload bool) (ferrytype.Message, error) {
	var (
		m     ferrytype.Message
		first error
	)
	if len(v) != numMessageColumns {
		return m, fmt.Errorf("%w: %d columns, want %d", ferrytype.ErrMalformedRow, len(v), numMessageColumns)
	}
	fail := func(col int, err error) {
		if first == nil {
			first = fmt.Errorf("%w: %s: %w", ferrytype.ErrMalformedRow, messageColumnNames[col], err)
		}
	}
	str := func(col int, required bool) string {
		s, null, err := textValue(v[col])
		switch {
		case err != nil:
			fail(col, err)
		case null && required:
			fail(col, errNull)
		case s == "" && required:
			fail(col, errEmpty)
		}
		return s
	}
	num := func(col int) int64 {
		n, err := intValue(v[col])
		if err != nil {
			fail(col, err)
		}
		return n
	}
	m.ID = str(0, true)
	m.AggregateType = str(1, false)
	m.AggregateID = str(2, false)
	m.Sequence = num(3)
	m.Type = str(4, true)
	// The payload is the event's largest value: taken as the driver
	// returned it, and checked as bytes.
	payload, null, perr := bytesValue(v[5])
	switch {
	case perr != nil:
		fail(5, perr)
	case null:
		fail(5, errNull)
	case len(payload) == 0:
		fail(5, errEmpty)
	case checkPayload && !json.Valid(payload):
		fail(5, errNotJSON)
	}
	m.Payload = payload
	headers := str(6, false)
	h, err := decodeHeaders([]byte(headers))
	if err != nil {
		fail(6, err)
	}
	if _, ok := h[""]; ok {
		fail(6, errEmptyName)
	}
	m.Headers = h
	m.Destination = str(7, false)
	m.Exchange = str(8, false)
	attempts := num(9)
	if attempts < 0 || attempts > math.MaxInt32 {
		fail(9, fmt.Errorf("%d is out of range", attempts))
	} else {
		m.Attempt = int(attempts)
	}
	var created nullTime
	if err := created.Scan(v[10]); err != nil {
		fail(10, err)
	}
	m.CreatedAt = created.Time
	return m, first
}

var (
	errNull    = errors.New("NULL")
	errEmpty   = errors.New("empty")
	errNotJSON = errors.New("not valid JSON")

	errEmptyName = errors.New("a header name is empty")
)

// textValue reads a text column's driver value.
func textValue(v any) (s string, null bool, err error) {
	switch x := v.(type) {
	case nil:
		return "", true, nil
	case string:
		return x, false, nil
	case []byte:
		return string(x), false, nil
	case int64:
		return strconv.FormatInt(x, 10), false, nil
	case int32:
		return strconv.FormatInt(int64(x), 10), false, nil
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), false, nil
	}
	return "", false, fmt.Errorf("a %T, not text", v)
}

// bytesValue reads a text column's driver value as bytes. A []byte is
// taken as it is: what database/sql and pgx scan into *any is a copy the
// caller owns, never the driver's buffer.
func bytesValue(v any) (b []byte, null bool, err error) {
	switch x := v.(type) {
	case nil:
		return nil, true, nil
	case []byte:
		return x, false, nil
	case string:
		return []byte(x), false, nil
	}
	s, null, err := textValue(v)
	return []byte(s), null, err
}

// intValue reads an integer column's driver value; NULL is 0.
func intValue(v any) (int64, error) {
	switch x := v.(type) {
	case nil:
		return 0, nil
	case int64:
		return x, nil
	case int32:
		return int64(x), nil
	case int:
		return int64(x), nil
	case uint64:
		if x > math.MaxInt64 {
			return 0, fmt.Errorf("%d is out of range", x)
		}
		return int64(x), nil
	case float64:
		if x != math.Trunc(x) || x < math.MinInt64 || x >= math.MaxInt64 {
			return 0, fmt.Errorf("%v is not an integer", x)
		}
		return int64(x), nil
	case []byte:
		return parseInt(string(x))
	case string:
		return parseInt(x)
	case time.Time:
		return 0, fmt.Errorf("a time, not an integer")
	}
	return 0, fmt.Errorf("a %T, not an integer", v)
}

func parseInt(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", token.Truncate(s, 64))
	}
	return n, nil
}

// EncodeHeaders returns headers as a JSON object, or nil for none.
func EncodeHeaders(h map[string]string) ([]byte, error) {
	if len(h) == 0 {
		return nil, nil
	}
	return json.Marshal(h)
}

// DecodeHeaders parses a JSON object of strings; nil or empty input, or
// JSON null, gives a nil map. Anything else is an error: it never panics.
func DecodeHeaders(b []byte) (map[string]string, error) {
	h, err := decodeHeaders(b)
	if err != nil {
		return nil, fmt.Errorf("decode headers: %w", err)
	}
	return h, nil
}

func decodeHeaders(b []byte) (map[string]string, error) {
	if len(b) == 0 || string(b) == "null" {
		return nil, nil
	}
	var h map[string]string
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, err
	}
	return h, nil
}
