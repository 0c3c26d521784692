package ferrykafka

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/ferrydev/ferry/ferrytype"
	"github.com/ferrydev/ferry/internal/tlsfiles"
)

// DefaultPort is the broker port of a host the URL gives without one.
const DefaultPort = "9092"

// SASL mechanisms a URL names with sasl=.
const (
	SASLPlain       = "plain"
	SASLScramSHA256 = "scram-sha-256"
	SASLScramSHA512 = "scram-sha-512"
)

// ClientConfig is what a kafka:// or kafkas:// URL says about the
// connection: the seed brokers, TLS, SASL and the client id. Opts turns it
// into franz-go options.
type ClientConfig struct {
	// Seeds are the seed brokers, host:port each ([v6]:port for IPv6).
	Seeds []string
	// TLS is nil for kafka:// and set for kafkas://: the system roots or
	// tls_ca's, tls_cert and tls_key's certificate, TLS 1.2 at least. Its
	// ServerName is empty: franz-go sets it to each broker's host.
	TLS *tls.Config
	// SASL is the mechanism: "" (none), SASLPlain, SASLScramSHA256 or
	// SASLScramSHA512.
	SASL string
	// User and Password authenticate with SASL.
	User, Password string
	// ClientID is the Kafka client id, shown in the brokers' logs and
	// quotas. Empty: Dial uses "ferry-relay".
	ClientID string

	// tlsFiles keeps the TLS options of the URL for String.
	tlsFiles url.Values
	// insecureSASL records insecure_sasl=true, for String.
	insecureSASL bool
}

// URL query options.
const (
	optSASL         = "sasl"
	optInsecureSASL = "insecure_sasl"
	optClientID     = "client_id"
	optTLSCA        = "tls_ca"
	optTLSCert      = "tls_cert"
	optTLSKey       = "tls_key"
	optTLSInsecure  = "tls_insecure_skip_verify"
)

var tlsOptions = []string{optTLSCA, optTLSCert, optTLSKey, optTLSInsecure}

// urlForms is how the errors of ParseURL say what a URL looks like.
const urlForms = "kafka://host:9092[,host2:9092...] or kafkas://host:9093 (TLS), " +
	"with user:password@ and sasl=plain|scram-sha-256|scram-sha-512 to authenticate"

// ParseURL reads a Kafka URL:
//
//	kafka://host1:9092,host2:9092?client_id=orders-relay
//	kafkas://user:password@host1:9093,host2:9093?sasl=scram-sha-512&tls_ca=/etc/ca.pem
//
// kafkas:// turns TLS on. A host without a port gets 9092. Query options:
//
//   - sasl=plain|scram-sha-256|scram-sha-512: the SASL mechanism, with
//     the user and password of the URL's userinfo (percent-encoded). A
//     user without sasl=, or sasl= without a user and password, is an
//     error.
//   - insecure_sasl=true: allows SASL over plain kafka://, which sends
//     the password (plain) or its proof (scram) unencrypted; without it
//     that is an error.
//   - client_id=NAME: the Kafka client id.
//   - tls_ca=FILE, tls_cert=FILE, tls_key=FILE: PEM files of the CA that
//     signed the brokers' certificates (default: the system roots) and
//     of a client certificate; tls_insecure_skip_verify=true skips the
//     verification of the brokers' certificates (tests only). kafkas://
//     only. The hyphenated spellings tls-ca, tls-cert and tls-key, which
//     ferrymysql's URLs use, are accepted too.
//
// Any other option is an error, so that a misspelt one is not silently
// ignored. Errors wrap ferrytype.ErrInvalidConfig and never contain the
// password.
func ParseURL(rawURL string) (ClientConfig, error) {
	cfg, err := parseURL(rawURL)
	if err != nil {
		return ClientConfig{}, ferrytype.RedactError(err, rawURL)
	}
	return cfg, nil
}

func parseURL(rawURL string) (ClientConfig, error) {
	var cfg ClientConfig
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: Kafka URL %s: %s", ferrytype.ErrInvalidConfig, ferrytype.RedactURL(rawURL),
			fmt.Sprintf(format, args...))
	}
	scheme, rest, ok := strings.Cut(rawURL, "://")
	switch {
	case strings.TrimSpace(rawURL) != rawURL:
		return cfg, bad("has leading or trailing spaces")
	case !ok:
		return cfg, bad("no scheme: want %s", urlForms)
	}
	scheme = strings.ToLower(scheme)
	if scheme != "kafka" && scheme != "kafkas" {
		return cfg, bad("unknown scheme %q: want %s", scheme, urlForms)
	}
	// The authority ends at the query or the fragment, and its userinfo at
	// its last @: an unencoded / or @ in a password stays in the password,
	// as ferrytype's redaction reads it.
	rest, fragment, hasFragment := strings.Cut(rest, "#")
	authority, rawQuery, _ := strings.Cut(rest, "?")
	if hasFragment && fragment != "" {
		return cfg, bad("a Kafka URL has no #fragment")
	}
	var userinfo string
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		userinfo, authority = authority[:at], authority[at+1:]
	}
	hostlist, path, _ := strings.Cut(authority, "/")
	if path != "" {
		return cfg, bad("a Kafka URL has no path (the part after the hosts' /)")
	}
	if userinfo != "" {
		user, pass, hasPass := strings.Cut(userinfo, ":")
		var err1, err2 error
		cfg.User, err1 = url.PathUnescape(user)
		cfg.Password, err2 = url.PathUnescape(pass)
		switch {
		case err1 != nil || err2 != nil:
			return cfg, bad("bad percent-encoding in the user or password (%% must start %%XX, two hex digits)")
		case cfg.User == "":
			return cfg, bad("the userinfo has no user name")
		case !hasPass || cfg.Password == "":
			return cfg, bad("user %q has no password (user:password@)", cfg.User)
		}
	}
	if hostlist == "" {
		return cfg, bad("no broker host: want %s", urlForms)
	}
	for _, hp := range strings.Split(hostlist, ",") {
		seed, err := seedAddr(hp)
		if err != nil {
			return cfg, bad("%v", err)
		}
		cfg.Seeds = append(cfg.Seeds, seed)
	}

	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return cfg, bad("the query does not parse (%s)", queryReason(err))
	}
	known := []string{optSASL, optInsecureSASL, optClientID, optTLSCA, optTLSCert, optTLSKey, optTLSInsecure}
	opts := url.Values{}
	for k, vs := range q {
		// Only the tls-* file options have a hyphenated spelling too.
		if canon := strings.ReplaceAll(k, "-", "_"); canon != k && slices.Contains(tlsOptions[:3], canon) {
			if _, dup := q[canon]; dup {
				return cfg, bad("option %s is given twice (as %s and %s)", canon, k, canon)
			}
			k = canon
		}
		if !slices.Contains(known, k) {
			return cfg, bad("unknown option %q (known: %s)", k, strings.Join(known, ", "))
		}
		if len(vs) > 1 {
			return cfg, bad("option %s is given %d times", k, len(vs))
		}
		opts[k] = vs
	}
	q = opts

	cfg.ClientID = q.Get(optClientID)
	if _, given := q[optClientID]; given && !validClientID(cfg.ClientID) {
		return cfg, bad("client_id %q must be 1 to 255 printable ASCII characters", cfg.ClientID)
	}

	cfg.SASL = strings.ToLower(q.Get(optSASL))
	switch cfg.SASL {
	case "", SASLPlain, SASLScramSHA256, SASLScramSHA512:
	default:
		return cfg, bad("sasl=%q: want plain, scram-sha-256 or scram-sha-512", q.Get(optSASL))
	}
	if _, given := q[optInsecureSASL]; given {
		v, err := strconv.ParseBool(q.Get(optInsecureSASL))
		if err != nil {
			return cfg, bad("insecure_sasl=%q: want true or false", q.Get(optInsecureSASL))
		}
		cfg.insecureSASL = v
	}
	switch {
	case cfg.SASL == "" && userinfo != "":
		return cfg, bad("the URL has a user and password but no sasl= mechanism (sasl=plain, scram-sha-256 or scram-sha-512)")
	case cfg.SASL != "" && userinfo == "":
		return cfg, bad("sasl=%s needs user:password@ before the hosts", cfg.SASL)
	case cfg.SASL != "" && scheme == "kafka" && !cfg.insecureSASL:
		return cfg, bad("sasl=%s over kafka:// sends the password unencrypted: use kafkas://, or add insecure_sasl=true", cfg.SASL)
	}

	cfg.tlsFiles = url.Values{}
	for _, k := range tlsOptions {
		if _, given := q[k]; given {
			cfg.tlsFiles.Set(k, q.Get(k))
		}
	}
	if scheme == "kafka" {
		if len(cfg.tlsFiles) > 0 {
			return cfg, bad("%s needs kafkas:// (TLS)", firstKey(cfg.tlsFiles))
		}
		return cfg, nil
	}
	cfg.TLS, err = tlsConfig(cfg.tlsFiles)
	if err != nil {
		return cfg, bad("%v", err)
	}
	return cfg, nil
}

// seedAddr checks one host[:port] of the URL and returns it as host:port.
func seedAddr(hp string) (string, error) {
	var host, port string
	if strings.HasPrefix(hp, "[") {
		end := strings.IndexByte(hp, ']')
		if end < 0 {
			return "", fmt.Errorf("host %q: an IPv6 address needs its closing ]", hp)
		}
		host = hp[1:end]
		switch after := hp[end+1:]; {
		case after == "":
		case strings.HasPrefix(after, ":"):
			port = after[1:]
		default:
			return "", fmt.Errorf("host %q: want [address]:port", hp)
		}
		if ip := net.ParseIP(host); ip == nil || ip.To4() != nil && !strings.Contains(host, ":") {
			return "", fmt.Errorf("host %q: %q is not an IPv6 address", hp, host)
		}
		host = "[" + host + "]"
	} else {
		host, port, _ = strings.Cut(hp, ":")
		if strings.Contains(port, ":") {
			return "", fmt.Errorf("host %q: write an IPv6 address in brackets, [address]:port", hp)
		}
		if !validHostName(host) {
			if host == "" {
				return "", fmt.Errorf("an empty host in the host list")
			}
			return "", fmt.Errorf("host %q: a host name has only letters, digits, '-', '_' and '.'", host)
		}
	}
	if port == "" {
		port = DefaultPort
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return "", fmt.Errorf("host %q: port %q is not a number within 1-65535", hp, port)
	}
	return host + ":" + port, nil
}

func validHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

func validClientID(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for _, r := range s {
		if r < 0x21 || r > 0x7e {
			return false
		}
	}
	return true
}

// queryReason says why url.ParseQuery refused a query without quoting it:
// its error quotes the offending piece, which may hold a password.
func queryReason(err error) string {
	if strings.Contains(err.Error(), "semicolon") {
		return "a ; separates options: use &"
	}
	return "bad percent-encoding: % must start %XX, two hex digits"
}

func firstKey(v url.Values) string {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys[0]
}

// tlsConfig builds the TLS configuration of a kafkas:// URL from its TLS
// options.
func tlsConfig(opts url.Values) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if err := tlsfiles.Apply(c, opts.Get(optTLSCA), opts.Get(optTLSCert), opts.Get(optTLSKey),
		tlsfiles.Names{CA: optTLSCA, Cert: optTLSCert, Key: optTLSKey}); err != nil {
		return nil, err
	}
	if v := opts.Get(optTLSInsecure); v != "" {
		skip, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("tls_insecure_skip_verify=%q: want true or false", v)
		}
		c.InsecureSkipVerify = skip
	}
	return c, nil
}

// Opts returns the franz-go options that connect as c says: the seed
// brokers, TLS, SASL and the client id (when set).
func (c ClientConfig) Opts() []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(c.Seeds...)}
	if c.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(c.TLS))
	}
	switch c.SASL {
	case SASLPlain:
		opts = append(opts, kgo.SASL(plain.Auth{User: c.User, Pass: c.Password}.AsMechanism()))
	case SASLScramSHA256:
		opts = append(opts, kgo.SASL(scram.Auth{User: c.User, Pass: c.Password}.AsSha256Mechanism()))
	case SASLScramSHA512:
		opts = append(opts, kgo.SASL(scram.Auth{User: c.User, Pass: c.Password}.AsSha512Mechanism()))
	}
	if c.ClientID != "" {
		opts = append(opts, kgo.ClientID(c.ClientID))
	}
	return opts
}

// String returns c as a URL that ParseURL reads back, its password
// replaced by xxxxx: safe for logs.
func (c ClientConfig) String() string {
	var b strings.Builder
	b.WriteString("kafka")
	if c.TLS != nil {
		b.WriteString("s")
	}
	b.WriteString("://")
	if c.User != "" {
		b.WriteString(escapeUser(c.User) + ":xxxxx@")
	}
	b.WriteString(strings.Join(c.Seeds, ","))
	q := url.Values{}
	for k, v := range c.tlsFiles {
		q[k] = v
	}
	if c.SASL != "" {
		q.Set(optSASL, c.SASL)
	}
	if c.insecureSASL {
		q.Set(optInsecureSASL, "true")
	}
	if c.ClientID != "" {
		q.Set(optClientID, c.ClientID)
	}
	if len(q) > 0 {
		b.WriteString("?" + q.Encode())
	}
	return b.String()
}

// escapeUser percent-encodes every byte of a user name but the unreserved
// ones, so that : and @ in it stay in it.
func escapeUser(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}
