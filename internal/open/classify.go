package open

import (
	"errors"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ferrydev/ferry/ferrytype"
)

// Permanent tells a failure to connect that no retry can mend (a
// configuration error: the database does not exist, the password is
// wrong, the exchange, queue or stream the relay was told to check does
// not exist, nor the Kafka topic) from a transient one (connection refused, a timeout, a name
// server failing), by the drivers' error codes, never their text. For a
// permanent cause it returns err classed as ferrytype.ErrInvalidConfig,
// its message naming the cause and the fix; for a transient one, nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	if ce := (*causeError)(nil); errors.As(err, &ce) {
		return ce
	}
	var pe *pgconn.PgError
	var me *mysql.MySQLError
	var ae *amqp.Error
	switch {
	case errors.As(err, &pe):
		switch pe.Code {
		case "3D000": // invalid_catalog_name
			return configCause("the database does not exist (PostgreSQL 3D000): create it, or fix the database name in the URL", err)
		case "28P01", "28000": // invalid_password, invalid_authorization_specification
			return configCause("PostgreSQL refused the login ("+pe.Code+"): fix the user or password in the URL, or pg_hba.conf", err)
		}
	case errors.As(err, &me):
		switch me.Number {
		case 1049: // ER_BAD_DB_ERROR
			return configCause("the database does not exist (MySQL 1049): create it, or fix the database name in the URL", err)
		case 1045, 1044, 1698: // ER_ACCESS_DENIED_ERROR, ER_DBACCESS_DENIED_ERROR, ER_ACCESS_DENIED_NO_PASSWORD_ERROR
			return configCause("MySQL denied access: fix the user or password in the URL, or the user's grants", err)
		}
	case errors.As(err, &ae):
		switch ae.Code {
		case amqp.NotFound: // a passive declare of what the relay was told to check
			return configCause("", err)
		case amqp.AccessRefused:
			return configCause("RabbitMQ refused access (403): fix the user, password or virtual host in the URL, or the user's permissions", err)
		case amqp.PreconditionFailed:
			return configCause("", err)
		}
	case errors.Is(err, kerr.UnknownTopicOrPartition): // a topic the relay was told to check
		return configCause("", err)
	case errors.Is(err, kerr.SaslAuthenticationFailed), errors.Is(err, kerr.IllegalSaslState),
		errors.Is(err, kerr.UnsupportedSaslMechanism):
		return configCause("Kafka refused the login: fix the user, password or sasl= mechanism in the URL", err)
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
		return configCause("Kafka denied access: grant the user the ACLs to describe, create and write the topics", err)
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return configCause("", err)
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked):
		return configCause("NATS refused the login: fix the user, password or token in the URL", err)
	}
	return nil
}

// configCause classes err as a configuration error, its message prefixed
// with cause (when not empty: err's own message may say it already).
func configCause(cause string, err error) error {
	return &causeError{cause: cause, err: err}
}

type causeError struct {
	cause string
	err   error
}

func (e *causeError) Error() string {
	if e.cause == "" {
		return e.err.Error()
	}
	return e.cause + ": " + e.err.Error()
}

func (e *causeError) Unwrap() []error { return []error{e.err, ferrytype.ErrInvalidConfig} }
