package ferryadmin

import "github.com/ferrydev/ferry/internal/errclass"

// MaxErrorClass bounds the length of an ErrorClass, in bytes.
const MaxErrorClass = errclass.MaxLen

// NoErrorText is the ErrorClass of an empty error text.
const NoErrorText = errclass.NoText

// ErrorClass reduces an error text to a stable class, so that the DEAD
// events that failed for the same reason group together whatever the ids,
// numbers and names in their messages (as ServicePulse groups failed
// messages by exception). It keeps the first line that is not blank, its
// runs of white space made one space, and replaces the variable parts by
// placeholders:
//
//   - a quoted text ("orders.paid", 'x', `y`) by "<s>", '<s>', `<s>` (a
//     single quote counts when it is not inside a word: can't is a word);
//   - a UUID by <uuid>;
//   - a number (42, 3.5, 127.0.0.1) by <n>, a duration (1.5s, 300ms,
//     2h45m) by <d>;
//   - hexadecimal (0x1f; 8 or more hex digits with at least one digit:
//     9f86d081) by <hex>;
//   - other tokens that begin with a digit (3rd, 01HZX3K5TQ...), and
//     tokens of 16 or more letters and digits with a digit, by <id>.
//
// Words with a few digits (utf8mb4, tcp4, v2) stay. The class is at most
// MaxErrorClass bytes: a longer one is cut between tokens and ends in
// "…". An empty text has the class NoErrorText. ErrorClass never fails,
// and the class of a class is itself.
//
//	attempt 20: returned: nats: no stream matches subject "orders.paid"
//	    → attempt <n>: returned: nats: no stream matches subject "<s>"
//	dial tcp 10.0.0.7:5672: i/o timeout after 30s
//	    → dial tcp <n>:<n>: i/o timeout after <d>
//	event 6ba7b810-9dad-11d1-80b4-00c04fd430c8: payload 1048577 bytes > max 1048576
//	    → event <uuid>: payload <n> bytes > max <n>
//
// The stores record each failed event's class with its last error
// (migration 0004), so that the DEAD events are grouped and selected by
// class in the database.
func ErrorClass(lastError string) string { return errclass.Of(lastError) }
