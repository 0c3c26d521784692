package ferrytype

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// redacted replaces every password and token in redacted text.
const redacted = "xxxxx"

// Patterns of a password in free text (an error message, a log line) that
// is not in a URL: a query or keyword DSN parameter (password=PASS,
// sslpassword='PASS'), a go-sql-driver/mysql DSN (user:PASS@tcp(host)).
// URLs in text are found by their scheme and read as urlSpans reads them.
var (
	// paramRe finds password-like parameters of a URL query, whose values
	// are never quoted and end at & or #; a value that would be empty (it
	// starts with & or #) runs to the next space. dsnParamRe finds them in a keyword DSN or
	// in text, where & and # are a password's own characters.
	paramRe = regexp.MustCompile(`(?i)[a-z0-9_.-]*(?:password|passwd|pass|pwd|secret|token)\s*=\s*` +
		`([^\s&#]+|\S*)`)
	dsnParamRe = regexp.MustCompile(`(?i)[a-z0-9_.-]*(?:password|passwd|pass|pwd|secret|token)\s*=\s*` +
		`('(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|\S*)`)
	mysqlDSNRe = regexp.MustCompile(`(?:^|[\s"'=(,])([^\s:/@"'=(,]*):(\S*)@(?:tcp[46]?|unix)?\(`)
	schemeRe   = regexp.MustCompile(`[A-Za-z0-9+.-]*://`)
)

// RedactURL returns s with every password and token removed, for logs,
// errors and printed settings. s may be a URL, a DSN or any text holding
// them. It removes the password of a URL's userinfo (unencoded @, : or
// spaces in it included), a NATS token (nats://token@host), password-like
// query and keyword DSN parameters (password=, pass=, sslpassword=,
// quoted values too), and the password of a go-sql-driver/mysql DSN
// (user:pass@tcp(host)/db). The rest of s stays, so that the host and the
// database still show; the user name too, unless it is the password
// itself (guest:guest reads xxxxx:xxxxx).
func RedactURL(s string) string {
	return cutSpans(s, append(secretSpans(s, true), textSpans(s)...))
}

// RedactSecrets returns text (an error message, a driver's error) with
// every password RedactURL finds removed, and also every occurrence of
// the passwords and tokens of urls, or of their parts: a driver may quote
// a piece of a URL it could not parse (a host lookup of what follows an
// unencoded @ in the password).
func RedactSecrets(text string, urls ...string) string {
	for _, u := range urls {
		for _, sec := range Secrets(u) {
			text = strings.ReplaceAll(text, sec, redacted)
		}
	}
	return RedactURL(text)
}

// RedactError returns err with the text RedactSecrets makes of it; errors.Is
// and errors.As still see everything err wraps. A nil err stays nil.
func RedactError(err error, urls ...string) error {
	if err == nil {
		return nil
	}
	return &redactedError{err: err, text: RedactSecrets(err.Error(), urls...)}
}

type redactedError struct {
	err  error
	text string
}

func (e *redactedError) Error() string { return e.text }
func (e *redactedError) Unwrap() error { return e.err }

// minSecret is the length under which a secret's parts are not replaced
// wherever they occur in a text: that would garble the text, and patterns
// still catch the secret where it stands in a URL.
const minSecret = 4

// Secrets returns the passwords and tokens of the URL or DSN s, as
// written and decoded, and their parts split at @, :, / and spaces, each
// of at least 4 bytes, longest first.
func Secrets(s string) []string {
	var out []string
	add := func(v string) {
		if len(v) >= minSecret && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	for _, sp := range secretSpans(s, false) {
		raws := []string{s[sp[0]:sp[1]]}
		if sp[0] > 0 && (s[sp[0]-1] == '\'' || s[sp[0]-1] == '"') {
			// A quote before the value is a keyword DSN's quoting, or,
			// in a URL query, the password's own first character.
			raws = append(raws, s[sp[0]-1:sp[1]])
			if sp[1] < len(s) && s[sp[1]] == s[sp[0]-1] {
				raws = append(raws, s[sp[0]-1:sp[1]+1])
			}
		}
		if sp[1] < len(s) && strings.ContainsRune(":.,", rune(s[sp[1]])) {
			// Taken for punctuation after the value, or its last character.
			raws = append(raws, s[sp[0]:sp[1]+1])
		}
		var forms []string
		for _, raw := range raws {
			forms = append(forms, raw, strings.NewReplacer(`\'`, `'`, `\"`, `"`, `\\`, `\`).Replace(raw))
			if d, err := url.PathUnescape(raw); err == nil {
				forms = append(forms, d)
			}
			if d, err := url.QueryUnescape(raw); err == nil {
				forms = append(forms, d)
			}
		}
		for _, f := range forms {
			add(f)
			for _, part := range strings.FieldsFunc(f, func(r rune) bool { return strings.ContainsRune("@:/ \t", r) }) {
				add(part)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// secretSpans returns where the passwords and tokens are in s read as one
// URL (or a comma-separated list of URLs), one keyword DSN or one
// go-sql-driver/mysql DSN; with users, also the user names that are
// their passwords (see userinfoSpans).
func secretSpans(s string, users bool) [][2]int {
	var spans [][2]int
	if starts := schemeRe.FindAllStringIndex(s, -1); len(starts) > 0 && strings.TrimSpace(s[:starts[0][0]]) == "" {
		for i, st := range starts {
			end := len(s)
			if i+1 < len(starts) {
				end = starts[i+1][0]
			}
			spans = append(spans, urlSpans(s, st[0], st[1], end, users)...)
		}
		// user://pw@tcp(host)/db is a go-sql-driver DSN whose password
		// begins with //, not a URL.
		return append(spans, mysqlDSNSpans(s, users)...)
	}
	if at := mysqlAt(s); at >= 0 && !strings.ContainsAny(s[at:], " \t\r\n") {
		if c := strings.IndexByte(s[:at], ':'); c >= 0 && !strings.ContainsAny(s[:c], " \t\r\n") {
			spans = append(spans, userinfoSpans(s, 0, c, c+1, at, users)...)
		}
	}
	spans = append(spans, mysqlDSNSpans(s, users)...)
	return append(spans, dsnParamSpans(s, 0, len(s))...)
}

// urlSpans returns the secrets of the URL s[start:end], whose authority
// begins at s[auth].
func urlSpans(s string, start, auth, end int, users bool) [][2]int {
	var spans [][2]int
	rest := s[auth:end]
	q := strings.IndexAny(rest, "?#")
	region := rest
	if q >= 0 {
		region = rest[:q]
	}
	if at := strings.LastIndexByte(region, '@'); at >= 0 {
		if c := strings.IndexByte(region[:at], ':'); c >= 0 {
			spans = append(spans, userinfoSpans(s, auth, auth+c, auth+c+1, auth+at, users)...)
		} else if sch := strings.ToLower(s[start : auth-3]); (sch == "nats" || sch == "tls") && at > 0 {
			spans = append(spans, [2]int{auth, auth + at}) // a token
		}
	}
	if q >= 0 {
		spans = append(spans, paramSpans(s, auth+q+1, end)...)
	}
	return spans
}

// paramSpans returns the values of password-like parameters in s[from:to]:
// query parameters (a=b&c=d) or keyword DSN settings (a=b c='d e').
func paramSpans(s string, from, to int) [][2]int {
	var spans [][2]int
	for _, m := range paramRe.FindAllStringSubmatchIndex(s[from:to], -1) {
		spans = append(spans, trimPunct(s, from+m[2], from+m[3]))
	}
	return spans
}

// dsnParamSpans is paramSpans for a keyword DSN or text, whose values may
// be quoted.
func dsnParamSpans(s string, from, to int) [][2]int {
	var spans [][2]int
	for _, m := range dsnParamRe.FindAllStringSubmatchIndex(s[from:to], -1) {
		spans = append(spans, valueSpan(s, from+m[2], from+m[3]))
	}
	return spans
}

// mysqlAt returns where the @ before the address of the go-sql-driver
// DSN s is (user:pass@tcp(host)/db, user:pass@/db), or -1.
func mysqlAt(s string) int {
	best := -1
	for i := 0; i < len(s); i++ {
		if s[i] != '@' {
			continue
		}
		rest := s[i+1:]
		for _, p := range []string{"tcp(", "tcp4(", "tcp6(", "unix(", "(", "/"} {
			if strings.HasPrefix(rest, p) {
				best = i
				break
			}
		}
	}
	if best > 0 && strings.ContainsAny(s[:best], "=") {
		return -1 // a keyword DSN or a URL query, not user:pass@
	}
	return best
}

// cutSpans replaces each span of s with the redaction mark.
func cutSpans(s string, spans [][2]int) string {
	if len(spans) == 0 {
		return s
	}
	slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	var b strings.Builder
	last := 0
	for _, sp := range spans {
		if sp[0] >= sp[1] {
			continue
		}
		if sp[0] < last { // overlaps a span already cut: cut the rest too
			last = max(last, sp[1])
			continue
		}
		b.WriteString(s[last:sp[0]])
		b.WriteString(redacted)
		last = sp[1]
	}
	b.WriteString(s[last:])
	return b.String()
}

// textSpans returns where the passwords are in the text s: in each URL
// (from its scheme to the next space or the next URL), in each
// password-like parameter, in each go-sql-driver/mysql DSN.
func textSpans(s string) [][2]int {
	var spans, urls [][2]int
	starts := schemeRe.FindAllStringIndex(s, -1)
	for i, st := range starts {
		end := len(s)
		if sp := strings.IndexAny(s[st[1]:], " \t\r\n"); sp >= 0 {
			end = st[1] + sp
		}
		if i+1 < len(starts) && starts[i+1][0] < end {
			end = starts[i+1][0]
		}
		end = spacedUserinfo(s, starts, i, end)
		spans = append(spans, urlSpans(s, st[0], st[1], end, true)...)
		urls = append(urls, [2]int{st[0], end})
	}
	// Parameters outside the URLs, read as a keyword DSN's.
	for _, sp := range dsnParamSpans(s, 0, len(s)) {
		if !slices.ContainsFunc(urls, func(u [2]int) bool { return sp[0] >= u[0] && sp[0] < u[1] }) {
			spans = append(spans, sp)
		}
	}
	return append(spans, mysqlDSNSpans(s, true)...)
}

// mysqlDSNSpans returns the passwords of the go-sql-driver/mysql DSNs in
// s (user:pass@tcp(host)/db), with their user names where userinfoSpans
// says so.
func mysqlDSNSpans(s string, users bool) [][2]int {
	var spans [][2]int
	for _, m := range mysqlDSNRe.FindAllStringSubmatchIndex(s, -1) {
		pw := valueSpan(s, m[4], m[5])
		spans = append(spans, userinfoSpans(s, m[2], m[3], pw[0], pw[1], users)...)
	}
	return spans
}

// userinfoSpans returns the span of the password s[p0:p1] of a URL's or
// DSN's userinfo, and also that of its user name s[u0:u1] when the two
// are the same (guest:guest): a user name left in view would show the
// password, so such a userinfo reads xxxxx:xxxxx in every message,
// whether it was redacted by pattern or by its known secrets. Without
// users only the password's span is returned (Secrets reads passwords).
func userinfoSpans(s string, u0, u1, p0, p1 int, users bool) [][2]int {
	spans := [][2]int{{p0, p1}}
	user, pw := s[u0:u1], s[p0:p1]
	if !users || pw == "" {
		return spans
	}
	if du, err := url.PathUnescape(user); err == nil {
		user = du
	}
	if dp, err := url.PathUnescape(pw); err == nil {
		pw = dp
	}
	if user == pw {
		spans = append(spans, [2]int{u0, u1})
	}
	return spans
}

// spacedUserinfo extends the URL starting at starts[i], which ends at end
// (a space), over a password with spaces: when the URL has user:... (or,
// in NATS, may hold a token) but no @ before end, and an @ follows on the same line with no /, ?, # or
// ": " (a message's punctuation) between, before the next URL.
func spacedUserinfo(s string, starts [][]int, i, end int) int {
	auth := s[starts[i][1]:end]
	if cut := strings.IndexAny(auth, "/?#"); cut >= 0 {
		return end
	}
	sch := strings.ToLower(s[starts[i][0] : starts[i][1]-3])
	token := sch == "nats" || sch == "tls" // a token has no ':'
	if !strings.Contains(auth, ":") && !token || strings.Contains(auth, "@") {
		return end
	}
	limit := len(s)
	if i+1 < len(starts) {
		limit = starts[i+1][0]
	}
	rest := s[end:limit]
	at := strings.IndexByte(rest, '@')
	if at < 0 || strings.ContainsAny(rest[:at], "/?#\n\r") || strings.Contains(rest[:at], ": ") {
		return end
	}
	host := rest[at+1:]
	if stop := strings.IndexAny(host, " \t\r\n"); stop >= 0 {
		host = host[:stop]
	}
	return end + at + 1 + len(host)
}

// valueSpan returns the span of a parameter's value s[v0:v1] without its
// quotes, and without a trailing ':', '.' or ',' before a space or the end
// of s (an error message's punctuation rather than the password's).
func valueSpan(s string, v0, v1 int) [2]int {
	if v0 < v1 && (s[v0] == '\'' || s[v0] == '"') {
		v0++
		if v1 > v0 && s[v1-1] == s[v0-1] {
			v1--
		}
	}
	return trimPunct(s, v0, v1)
}

// trimPunct returns the span s[v0:v1] without a trailing ':', '.' or ','
// before a space or the end of s.
func trimPunct(s string, v0, v1 int) [2]int {
	if v1 > v0 && strings.ContainsRune(":.,", rune(s[v1-1])) && (v1 == len(s) || s[v1] == ' ') {
		v1--
	}
	return [2]int{v0, v1}
}
