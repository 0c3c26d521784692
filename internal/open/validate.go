package open

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/ferrydev/ferry/ferrybroker/ferryamqp"
	"github.com/ferrydev/ferry/ferrybroker/ferrykafka"
	"github.com/ferrydev/ferry/ferrytype"
)

// The forms each kind of URL takes, for the errors that say what was
// expected.
const (
	databaseForms = "mysql://user@host:3306/db, postgres://user@host:5432/db, sqlite:///path/file.db " +
		"(a password goes after the user, user:password@, percent-encoded)"
	brokerForms = "nats://host:4222, amqp://user@host:5672/vhost, kafka://host:9092[,host2:9092], redis://host:6379"
	// brokerSchemes names the broker schemes an unknown one is told.
	brokerSchemes = "nats, tls, amqp, amqps, kafka, kafkas, redis or rediss"
)

var (
	schemeSyntax = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)
	keywordDSN   = regexp.MustCompile(`^\s*[A-Za-z_]+\s*=`)
	mysqlDSN     = regexp.MustCompile(`@(?:tcp[46]?|unix)?\(|^[^:/@]*(?::[^@]*)?@/`)
)

// ValidateDatabaseURL checks, without connecting, that rawURL is a
// database URL ferry can open: a known scheme, a host, a numeric port
// within 1-65535, no unencoded @, space or / in the user or password, and
// a URL the store's own parser accepts (pgx for postgres://,
// go-sql-driver/mysql for mysql://, the SQLite DSN for sqlite:). The error
// wraps ferrytype.ErrInvalidConfig, says exactly what is wrong, and shows
// the URL with its password redacted.
func ValidateDatabaseURL(rawURL string) error {
	d, err := databaseFor(rawURL)
	if err != nil {
		return err
	}
	return ferrytype.RedactError(d.check(rawURL), rawURL)
}

// ValidateBrokerURL checks, without connecting, that rawURL is a broker URL
// ferry can dial (nats:// or tls://, a comma-separated list of them;
// amqp:// or amqps://; kafka:// or kafkas://, with comma-separated
// hosts; redis:// or rediss://), as ValidateDatabaseURL does for databases.
func ValidateBrokerURL(rawURL string) error {
	b, err := brokerForURL(rawURL)
	if err != nil {
		return err
	}
	return ferrytype.RedactError(b.check(rawURL), rawURL)
}

// unschemed explains a non-empty URL of kind ("database", "broker") whose
// scheme is missing or unknown: a keyword DSN, a go-sql-driver DSN, a bare
// host, an unknown scheme. want names the schemes, forms the URL forms.
func unschemed(kind, rawURL, want, forms string) error {
	shown := ferrytype.RedactURL(rawURL)
	sch, _, hasColon := strings.Cut(rawURL, ":")
	switch {
	case strings.TrimSpace(rawURL) != rawURL:
		return fmt.Errorf("%w: %s URL %q has leading or trailing spaces", ferrytype.ErrInvalidConfig, kind, shown)
	case keywordDSN.MatchString(rawURL):
		return fmt.Errorf("%w: %s URL %q is a keyword connection string (key=value ...): ferry takes URLs: %s",
			ferrytype.ErrInvalidConfig, kind, shown, forms)
	case kind == "database" && mysqlDSN.MatchString(rawURL):
		return fmt.Errorf("%w: database URL %q is a go-sql-driver DSN (...@tcp(host)/db): "+
			"write it as mysql://user@host:3306/db (user:password@ with a password, percent-encoded)", ferrytype.ErrInvalidConfig, shown)
	case !hasColon || !schemeSyntax.MatchString(sch) || !strings.Contains(rawURL, "://") && strings.Contains(rawURL, "@"):
		return fmt.Errorf("%w: %s URL %q has no scheme: want %s", ferrytype.ErrInvalidConfig, kind, shown, forms)
	case !strings.HasPrefix(rawURL[len(sch):], "://"):
		if _, err := strconv.Atoi(strings.SplitN(rawURL[len(sch)+1:], "/", 2)[0]); err == nil {
			return fmt.Errorf("%w: %s URL %q has no scheme (%s is read as the host): want %s", ferrytype.ErrInvalidConfig,
				kind, shown, sch, forms)
		}
	}
	return fmt.Errorf("%w: %s URL %q: unknown scheme %q (want %s)", ferrytype.ErrInvalidConfig, kind, shown,
		strings.ToLower(sch), want)
}

// authority checks the part of the URL rawURL (of kind, "database" or
// "broker") between :// and the path: the user and password have no
// unencoded @, space or /, and each host (comma-separated when many is
// true) has a name unless hostless, and a numeric port within 1-65535.
// It then parses rawURL with net/url and returns it.
func authority(kind, rawURL string, many, hostless bool) (*url.URL, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s URL %q: %s", ferrytype.ErrInvalidConfig, kind, ferrytype.RedactURL(rawURL),
			fmt.Sprintf(format, args...))
	}
	if strings.TrimSpace(rawURL) != rawURL {
		return nil, bad("has leading or trailing spaces")
	}
	_, rest, _ := strings.Cut(rawURL, "://")
	region := rest
	if i := strings.IndexAny(region, "?#"); i >= 0 {
		region = region[:i]
	}
	var userinfo string
	if at := strings.LastIndexByte(region, '@'); at >= 0 {
		userinfo, region = region[:at], region[at+1:]
	}
	hostport, _, _ := strings.Cut(region, "/")
	switch {
	case strings.Contains(userinfo, "@"):
		return nil, bad("the user or password holds an unencoded @: write it as %%40")
	case strings.ContainsAny(userinfo, " \t\r\n"):
		return nil, bad("the user or password holds a space: write it as %%20")
	case strings.Contains(userinfo, "/"):
		return nil, bad("the user or password holds an unencoded /: write it as %%2F")
	case strings.ContainsAny(userinfo, "%") && !validEscapes(userinfo):
		return nil, bad("bad percent-encoding in the user or password (%% must start %%XX, two hex digits)")
	}
	hosts := []string{hostport}
	if many {
		hosts = strings.Split(hostport, ",")
	}
	for _, hp := range hosts {
		host, port := splitHostPort(hp)
		if host == "" && !hostless {
			return nil, bad("has no host")
		}
		if port != "" {
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				return nil, bad("port %q is not a number within 1-65535", port)
			}
		}
	}
	u, err := url.Parse(rawURL)
	var ee url.EscapeError
	switch {
	case err == nil:
		return u, nil
	case many && !errors.As(err, &ee):
		return nil, nil // the driver reads a host list net/url cannot
	}
	return nil, bad("%s", parseReason(err))
}

// splitHostPort splits host:port, [v6]:port or a bare host; the port is ""
// when there is none.
func splitHostPort(hp string) (host, port string) {
	if strings.HasPrefix(hp, "[") {
		end := strings.IndexByte(hp, ']')
		if end < 0 {
			return hp, ""
		}
		host, rest := hp[1:end], hp[end+1:]
		return host, strings.TrimPrefix(rest, ":")
	}
	if i := strings.LastIndexByte(hp, ':'); i >= 0 {
		return hp[:i], hp[i+1:]
	}
	return hp, ""
}

// validEscapes reports whether every % in s starts a %XX escape.
func validEscapes(s string) bool {
	_, err := url.PathUnescape(s)
	return err == nil
}

// parseReason says why net/url refused a URL, without quoting the URL
// (url.Error does) or a piece of it that may be part of a password.
func parseReason(err error) string {
	var ee url.EscapeError
	if errors.As(err, &ee) {
		return "bad percent-encoding (% must start %XX, two hex digits)"
	}
	var he url.InvalidHostError
	if errors.As(err, &he) {
		return "invalid character " + string(he) + " in the host"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return "cannot parse: " + ferrytype.RedactURL(err.Error())
}

// checkPostgres checks a postgres:// URL: several hosts allowed, a host
// may come from the host= parameter instead, and pgx must parse it.
func checkPostgres(rawURL string, parse func(string) error) error {
	if _, err := authority("database", rawURL, true, true); err != nil {
		return err
	}
	if parsed, err := url.Parse(rawURL); err == nil && parsed.Host == "" && parsed.Query().Get("host") == "" {
		return fmt.Errorf("%w: database URL %q has no host (postgres://user@host:5432/db)",
			ferrytype.ErrInvalidConfig, ferrytype.RedactURL(rawURL))
	}
	return parse(rawURL)
}

// checkMySQL checks a mysql:// URL: a host unless socket= names one, and
// ParseURL (go-sql-driver/mysql's DSN parser after conversion) accepts it.
func checkMySQL(rawURL string, parse func(string) error) error {
	u, err := authority("database", rawURL, false, true)
	if err != nil {
		return err
	}
	if u.Hostname() == "" && u.Query().Get("socket") == "" {
		return fmt.Errorf("%w: database URL %q has no host (mysql://user@host:3306/db, or ?socket=/path)",
			ferrytype.ErrInvalidConfig, ferrytype.RedactURL(rawURL))
	}
	return parse(rawURL)
}

// checkNATS checks a nats:// or tls:// URL, or a comma-separated list of
// them, as nats.go reads it.
func checkNATS(rawURL string) error {
	for _, one := range strings.Split(rawURL, ",") {
		one = strings.TrimSpace(one)
		if !strings.Contains(one, "://") {
			one = "nats://" + one // nats.go reads a bare host:port so
		}
		if !slices.Contains([]string{"nats", "tls"}, scheme(one)) {
			return unschemed("broker", one, brokerSchemes, brokerForms)
		}
		if _, err := authority("broker", one, false, false); err != nil {
			return ferrytype.RedactError(err, rawURL)
		}
	}
	return nil
}

// checkAMQP checks an amqp:// or amqps:// URL as amqp091-go reads it, or
// a comma-separated list of them (the nodes of a cluster) as ferryamqp
// reads it: each URL so, none empty, all in one virtual host.
func checkAMQP(rawURL string) error {
	urls := ferryamqp.SplitURL(rawURL)
	if len(urls) > 1 {
		for _, u := range urls {
			if u == "" {
				continue // CheckURL says which
			}
			if _, err := authority("broker", u, false, false); err != nil {
				return ferrytype.RedactError(err, rawURL)
			}
		}
		return ferryamqp.CheckURL(rawURL)
	}
	if _, err := authority("broker", rawURL, false, false); err != nil {
		return err
	}
	if _, err := amqp.ParseURI(rawURL); err != nil {
		return ferrytype.RedactError(fmt.Errorf("%w: broker URL %q: %s", ferrytype.ErrInvalidConfig,
			ferrytype.RedactURL(rawURL), err), rawURL)
	}
	return nil
}

// checkKafka checks a kafka:// or kafkas:// URL as ferrykafka.Dial reads
// it: the hosts, TLS files, SASL and client id options (ParseURL).
func checkKafka(rawURL string) error {
	_, err := ferrykafka.ParseURL(rawURL)
	return err
}
