package ferrypgoutput

import (
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/ferrydev/ferry/ferrytype"
)

// DefaultTable is the outbox table a Config without Table reads.
const DefaultTable = "outbox_event"

// DefaultStatusInterval is how often Stream sends a standby status update
// when Config.StatusInterval is zero.
const DefaultStatusInterval = time.Second

// Config configures a Feed. A nil *Config is not allowed: URL is required.
type Config struct {
	// URL is the database's pgx connection URL,
	// postgres://user:password@host:port/database?sslmode=..., with TLS
	// set through sslmode, sslrootcert, sslcert and sslkey as pgx reads
	// them. Required. The user needs the REPLICATION attribute (or to be
	// a superuser), and to own the table when the publication is to be
	// created by Check. Passwords never appear in errors or logs.
	URL string
	// Table is the outbox table, "table" (in schema public) or
	// "schema.table". Default "outbox_event". Each part is validated
	// (letters, digits and underscores, not starting with a digit, at
	// most 63 bytes) and quoted.
	Table string
	// Slot is the logical replication slot's name. Default "ferry_" and
	// the table's name (without its schema), lowercased, cut to 63 bytes.
	// It must match ^[a-z0-9_]{1,63}$. The slot outlives the feed: it is
	// what makes the server keep the WAL the feed has not checkpointed,
	// so drop it (pg_drop_replication_slot) when the feed is retired.
	Slot string
	// Publication is the publication's name. Default the slot's default
	// name ("ferry_" and the table's name, lowercased). It is validated
	// as an identifier and quoted. It must publish the outbox table only.
	Publication string
	// StatusInterval is how often Stream sends the server a standby
	// status update with the last position passed to Flushed (which is
	// what lets the server discard WAL). Default 1s.
	StatusInterval time.Duration
	// Logger receives the feed's few log lines (the slot or publication
	// it created). Default slog.Default().
	Logger *slog.Logger
}

// settings are a validated Config with its defaults applied.
type settings struct {
	url            string
	schema, table  string
	slot, pub      string
	statusInterval time.Duration
	logger         *slog.Logger
}

var slotRe = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// withDefaults validates cfg and applies its defaults.
func (cfg *Config) withDefaults() (settings, error) {
	if cfg == nil {
		return settings{}, fmt.Errorf("%w: ferrypgoutput.New: Config is nil (Config.URL is required)", ferrytype.ErrInvalidConfig)
	}
	s := settings{url: cfg.URL, schema: "public", table: cfg.Table, slot: cfg.Slot, pub: cfg.Publication,
		statusInterval: cfg.StatusInterval, logger: cfg.Logger}
	if s.url == "" {
		return settings{}, fmt.Errorf("%w: ferrypgoutput: Config.URL is required", ferrytype.ErrInvalidConfig)
	}
	if s.table == "" {
		s.table = DefaultTable
	}
	if schema, table, ok := strings.Cut(s.table, "."); ok {
		if err := ferrytype.ValidateIdentifier("Config.Table's schema", schema, 63); err != nil {
			return settings{}, err
		}
		s.schema, s.table = schema, table
	}
	if err := ferrytype.ValidateIdentifier("Config.Table", s.table, 63); err != nil {
		return settings{}, err
	}
	def := "ferry_" + strings.ToLower(s.table)
	if len(def) > 63 {
		def = def[:63]
	}
	if s.slot == "" {
		s.slot = def
	}
	if !slotRe.MatchString(s.slot) {
		return settings{}, fmt.Errorf("%w: Config.Slot %q must match ^[a-z0-9_]{1,63}$", ferrytype.ErrInvalidIdentifier, s.slot)
	}
	if s.pub == "" {
		s.pub = def
	}
	if err := ferrytype.ValidateIdentifier("Config.Publication", s.pub, 63); err != nil {
		return settings{}, err
	}
	if s.statusInterval < 0 {
		return settings{}, fmt.Errorf("%w: Config.StatusInterval %s is negative", ferrytype.ErrInvalidConfig, s.statusInterval)
	}
	if s.statusInterval == 0 {
		s.statusInterval = DefaultStatusInterval
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	return s, nil
}

// quoteIdent quotes a validated identifier.
func quoteIdent(name string) string { return `"` + name + `"` }
