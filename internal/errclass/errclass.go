// Package errclass reduces error texts to classes (ferryadmin.ErrorClass),
// for the stores, which record each failed event's class, and for
// ferryadmin, which groups DEAD events by it.
package errclass

import (
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"
)

// MaxLen bounds the length of a class, in bytes.
const MaxLen = 200

// NoText is the class of an empty error text.
const NoText = "(no error text)"

// The placeholders Of puts in place of variable parts.
const (
	classNumber   = "<n>"    // 42, 3.14, 127.0.0.1
	classDuration = "<d>"    // 1.5s, 300ms, 2h45m
	classHex      = "<hex>"  // 0x1f, 9f86d081884c, deadbeef42
	classID       = "<id>"   // 01HZX3K5TQ..., 3rd, a long token of letters and digits
	classUUID     = "<uuid>" // 6ba7b810-9dad-11d1-80b4-00c04fd430c8
	classQuoted   = "<s>"    // the inside of "…", '…' and `…`
)

// Of is ferryadmin.ErrorClass: the class of an error text (see there).
func Of(lastError string) string {
	line := firstLine(lastError)
	if line == "" {
		return NoText
	}
	s := normalize(line)
	if len(s) > MaxLen {
		s = cut(s, MaxLen-len(ellipsis))
	}
	return s
}

const ellipsis = "…"

// firstLine returns the first line of s with text, its white space folded.
func firstLine(s string) string {
	for len(s) > 0 {
		line := s
		if i := strings.IndexAny(s, "\r\n"); i >= 0 {
			line, s = s[:i], s[i+1:]
		} else {
			s = ""
		}
		if line = strings.Join(strings.Fields(strings.ToValidUTF8(line, "\uFFFD")), " "); line != "" {
			return line
		}
	}
	return ""
}

// cut returns the longest prefix of s of at most n bytes, followed by the
// ellipsis, that does not end within a token (a run of letters and digits),
// a placeholder or a UTF-8 character, and that is its own class: a cut can
// change what the text before it means (a single quote that was followed by
// a word, and so did not close, closes when the ellipsis follows it), and
// such a cut is not taken.
func cut(s string, n int) string {
	for i := n; i > 0; i-- {
		if !utf8.RuneStart(s[i]) || alnum(s[i-1]) && alnum(s[i]) {
			continue
		}
		if k := strings.LastIndexByte(s[:i], '<'); k >= 0 && strings.Trim(s[k+1:i], "abcdefghijklmnopqrstuvwxyz") == "" {
			i = k + 1 // within a placeholder: before it
			continue
		}
		if c := strings.TrimRight(s[:i], " ") + ellipsis; normalize(c) == c {
			return c
		}
	}
	return ellipsis
}

func alnum(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func digit(c byte) bool { return c >= '0' && c <= '9' }
func hexDigit(c byte) bool {
	return digit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// wordy reports whether c belongs to a word as far as single quotes are
// concerned: a letter or digit, or the edge of a placeholder, which stands
// for one.
func wordy(c byte) bool { return alnum(c) || c == '<' || c == '>' }

// normalize replaces the variable parts of one folded line.
func normalize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '`':
			if end := closing(s, i, c); end > 0 {
				b.WriteByte(c)
				b.WriteString(classQuoted)
				b.WriteByte(c)
				i = end + 1
				continue
			}
		case c == '\'' && (i == 0 || !wordy(s[i-1])):
			if end := closingSingle(s, i); end > 0 {
				b.WriteString("'" + classQuoted + "'")
				i = end + 1
				continue
			}
		case alnum(c) && (i == 0 || !alnum(s[i-1])):
			if isUUID(s[i:]) {
				b.WriteString(classUUID)
				i += 36
				continue
			}
			end := tokenEnd(s, i)
			b.WriteString(classify(s[i:end]))
			i = end
			continue
		}
		b.WriteByte(c)
		i++
	}
	return b.String()
}

// closing returns the index of the quote q that closes the one at open,
// skipping quotes escaped by a backslash, or 0 when there is none.
func closing(s string, open int, q byte) int {
	for j := open + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case q:
			return j
		}
	}
	return 0
}

// closingSingle returns the index of the single quote that closes the one
// at open: the next one not followed by a word character. 0 when there is
// none.
func closingSingle(s string, open int) int {
	for j := open + 1; j < len(s); j++ {
		if s[j] == '\'' && (j+1 == len(s) || !wordy(s[j+1])) {
			return j
		}
	}
	return 0
}

// isUUID reports whether s begins with a UUID not followed by a letter or
// digit.
func isUUID(s string) bool {
	if len(s) < 36 || (len(s) > 36 && alnum(s[36])) {
		return false
	}
	for i := 0; i < 36; i++ {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if !hexDigit(s[i]) {
				return false
			}
		}
	}
	return true
}

// tokenEnd returns the end of the token at i: a run of letters and digits;
// for a token that begins with a digit, dots between runs are part of it
// (3.14, 127.0.0.1, 1.5s).
func tokenEnd(s string, i int) int {
	num := digit(s[i])
	j := i
	for j < len(s) {
		if alnum(s[j]) {
			j++
			continue
		}
		if num && s[j] == '.' && j+1 < len(s) && alnum(s[j+1]) {
			j++
			continue
		}
		break
	}
	return j
}

var (
	durationRE = regexp.MustCompile(`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`)
	numberRE   = regexp.MustCompile(`^[0-9]+(\.[0-9]+)*$`)
)

// classify returns the placeholder of a token, or the token when it stays.
func classify(tok string) string {
	digits, hex := 0, true
	for i := 0; i < len(tok); i++ {
		if digit(tok[i]) {
			digits++
		}
		hex = hex && hexDigit(tok[i])
	}
	switch {
	case digit(tok[0]):
		switch {
		case numberRE.MatchString(tok):
			return classNumber
		case durationRE.MatchString(tok):
			return classDuration
		case hex || len(tok) > 2 && (tok[1] == 'x' || tok[1] == 'X') && tok[0] == '0' && allHex(tok[2:]):
			return classHex
		}
		return classID
	case digits > 0 && hex && len(tok) >= 8:
		return classHex
	case digits > 0 && len(tok) >= 16:
		return classID
	}
	return tok
}

func allHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !hexDigit(s[i]) {
			return false
		}
	}
	return s != ""
}

var classSplit = regexp.MustCompile(`<(?:n|d|hex|id|uuid|s)>|\s+|` + ellipsis)

// Words returns up to 8 of the longest parts of class (3 bytes or
// more) that every error text of that class contains as they are: the
// text between placeholders and spaces. A store can look for them with
// LIKE, to send back fewer rows that are not of the class; Of decides.
func Words(class string) []string {
	if class == NoText {
		return nil
	}
	var out []string
	for _, w := range classSplit.Split(class, -1) {
		if len(w) >= 3 && !strings.ContainsRune(w, utf8.RuneError) {
			out = append(out, w)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	if len(out) > 8 {
		out = out[:8]
	}
	return out
}
