package ferrystore

import (
	"fmt"
	"strings"

	"github.com/ferrydev/ferry/ferrytype"
)

// MigrationID names one embedded migration: 0002_discard.
type MigrationID struct {
	Version int
	Name    string
}

// String returns the migration's file name without its suffix.
func (m MigrationID) String() string { return fmt.Sprintf("%04d_%s", m.Version, m.Name) }

// Schema is the state of a store's table compared with the migrations the
// store embeds (Store.CheckSchema).
type Schema struct {
	// Table is the outbox table's name.
	Table string
	// TableExists says whether the table exists.
	TableExists bool
	// Applied are the migrations the migration table records as run.
	Applied []MigrationID
	// Missing are the embedded migrations not recorded as run: ferry
	// migrate runs them.
	Missing []MigrationID
	// Unknown are recorded migrations this build does not embed: a newer
	// ferry migrated the table.
	Unknown []MigrationID
	// Unrecorded is set when the table exists but the migration table
	// records none of its migrations: another tool created it (from
	// ferry migrate --print, say), so its version cannot be told.
	Unrecorded bool
}

// Current reports whether every embedded migration has run.
func (s Schema) Current() bool { return s.TableExists && len(s.Missing) == 0 }

// Err returns nil when the schema is current (or unrecorded), else an
// error wrapping ferrytype.ErrSchemaOutdated that names the missing
// migrations and the fix.
func (s Schema) Err() error {
	switch {
	case !s.TableExists && len(s.Applied) > 0:
		return fmt.Errorf("%w: outbox table %s does not exist, yet %s records its migrations %s as run: "+
			"delete those rows (component 'outbox:%s'), then run ferry migrate",
			ferrytype.ErrSchemaOutdated, s.Table, MigrationTable, ids(s.Applied), s.Table)
	case !s.TableExists:
		return fmt.Errorf("%w: outbox table %s does not exist (migrations %s not run): run ferry migrate",
			ferrytype.ErrSchemaOutdated, s.Table, ids(s.Missing))
	case len(s.Missing) > 0:
		what := "migration"
		if len(s.Missing) > 1 {
			what = "migrations"
		}
		return fmt.Errorf("%w: outbox table %s lacks %s %s (it has %s): run ferry migrate",
			ferrytype.ErrSchemaOutdated, s.Table, what, ids(s.Missing), ids(s.Applied))
	}
	return nil
}

// Warning describes what is odd about a schema that is usable: a table
// migrated by a newer ferry, or one whose migrations are not recorded. It
// is empty otherwise.
func (s Schema) Warning() string {
	switch {
	case s.TableExists && len(s.Unknown) > 0:
		return fmt.Sprintf("outbox table %s has migrations this ferry does not know (%s): a newer ferry migrated it; "+
			"this one keeps working with the columns it knows, but upgrade it", s.Table, ids(s.Unknown))
	case s.Unrecorded:
		return fmt.Sprintf("outbox table %s exists but %s records none of its migrations (created by another tool?): "+
			"its version is not checked", s.Table, MigrationTable)
	}
	return ""
}

// MigrationTable is the table that records which migrations ran, per
// component ("outbox:<table>").
const MigrationTable = "ferry_migration"

func ids(ms []MigrationID) string {
	if len(ms) == 0 {
		return "none"
	}
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = m.String()
	}
	return strings.Join(s, ", ")
}
