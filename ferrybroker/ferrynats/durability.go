package ferrynats

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ferrydev/ferry/ferrybroker"
	"github.com/ferrydev/ferry/ferrytype"
)

// Durability reads from JetStream what a PubAck of the stream Config.Stream
// named is worth: one row, from the stream's info (its replicas, its
// storage, its persist mode, and how many of its replicas are current).
//
//   - memory storage is DurabilityVolatile, whatever the replicas: an
//     acknowledged message is in memory only;
//   - file storage in async persist mode is DurabilityVolatile too: the
//     stream acknowledges a message before writing it, so a crash of the
//     server loses it (the server allows that mode on one replica only);
//   - file storage on 1 replica is DurabilitySingle;
//   - file storage on 2 replicas is DurabilitySingle as well: a majority
//     of 2 is 2, so an acknowledged message is on both, but either one
//     down stops every acknowledgement, and the way out (scaling the
//     stream down to 1 replica) leaves one copy;
//   - file storage on 3 replicas or more is DurabilityReplicated: each
//     acknowledgement waits for a majority, at least 2 servers; but
//     DurabilitySingle while the stream info shows no leader, or no
//     majority of current replicas (the leader and those the cluster info
//     calls current): the stream acknowledges nothing until a majority is
//     back, and what it acknowledged before is on fewer than a majority
//     of the servers that answer (ferryamqp reads a quorum queue with no
//     majority online the same way).
//
// A file-storage stream acknowledges a message once it is written, and
// the server fsyncs its files every sync_interval (2 minutes by default)
// unless its jetstream block says sync_interval: always, so an
// acknowledged message may still be in the page cache of every replica
// when the power goes. The server reports that setting to no client (not
// in its INFO, not in $JS.API.INFO, not in stream info; only its
// monitoring port and the system account see it): Settings says so, and
// the Fix of a row below replicated names the setting.
//
// Without a stream named the row is DurabilityUnknown: events go to
// whichever stream captures their subject. A stream the server says does
// not exist, or that it cannot describe, is a row of DurabilityUnknown
// with the server's answer in Settings. An error is returned only when
// the server could not be asked (the connection is down, the request
// timed out, ctx ended); it never contains a password.
func (p *Publisher) Durability(ctx context.Context) ([]ferrybroker.Durability, error) {
	if p.stream == "" {
		return []ferrybroker.Durability{{
			Destination: "subjects (no stream named)",
			Level:       ferrybroker.DurabilityUnknown,
			Settings:    "no stream named: each event goes to whichever stream captures its subject",
			Fix:         "name the stream (--stream) so ferry can read its replicas and storage",
		}}, nil
	}
	st, err := p.js.Stream(ctx, p.stream)
	if err == nil {
		return []ferrybroker.Durability{streamDurability(p.stream, st.CachedInfo())}, nil
	}
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return []ferrybroker.Durability{{
			Destination: "stream " + p.stream,
			Level:       ferrybroker.DurabilityUnknown,
			Settings:    ferrytype.RedactURL(fmt.Sprintf("stream %s: not found (%v)", p.stream, err)),
			Fix:         fmt.Sprintf("create stream %s (--declare with --subjects), or name the stream the events go to (--stream)", p.stream),
		}}, nil
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrJetStreamNotEnabled),
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount), errors.As(err, &apiErr):
		// The server answered, without describing the stream.
		return []ferrybroker.Durability{{
			Destination: "stream " + p.stream,
			Level:       ferrybroker.DurabilityUnknown,
			Settings:    ferrytype.RedactURL(fmt.Sprintf("stream %s: JetStream did not describe it (%v)", p.stream, err)),
			Fix:         weakFix(p.stream),
		}}, nil
	}
	return nil, ferrytype.RedactError(fmt.Errorf("ferrynats: read stream %s: %w", p.stream, err))
}

const (
	// fsyncSettings ends the Settings of a file-storage stream.
	fsyncSettings = "fsync: the server's sync_interval, not reported to clients " +
		"(default 2m: an acknowledged message may not be on disk yet, unless its jetstream block says sync_interval: always)"
	// fsyncFix ends the Fix of a file-storage stream below replicated.
	fsyncFix = "sync_interval: always in the server's jetstream block, for an acknowledged message to be fsynced"
)

// weakFix is the Fix of a stream below replicated.
func weakFix(stream string) string {
	return fmt.Sprintf("declare the stream with 3 replicas on a 3-node JetStream cluster "+
		"(ferry relay --declare --stream-replicas 3, Config.Replicas in Go, or nats stream edit %s --replicas 3), file storage", stream)
}

// streamDurability classifies the stream name of info (see
// Publisher.Durability).
func streamDurability(name string, info *jetstream.StreamInfo) ferrybroker.Durability {
	d := ferrybroker.Durability{Destination: "stream " + name}
	replicas := max(info.Config.Replicas, 1)
	leader, current, behind := currentReplicas(info.Cluster)
	base := "stream " + name + ": 1 replica"
	switch {
	case replicas == 1:
	case !leader:
		base = fmt.Sprintf("stream %s: %d replicas (no leader)", name, replicas)
	default:
		base = fmt.Sprintf("stream %s: %d replicas (%d current)", name, replicas, current)
	}
	switch {
	case info.Config.Storage == jetstream.MemoryStorage:
		d.Level = ferrybroker.DurabilityVolatile
		d.Settings = base + ", memory storage (an acknowledged message is in memory only)"
		d.Fix = fmt.Sprintf("recreate stream %s with file storage (a stream's storage cannot be edited) "+
			"and 3 replicas on a 3-node JetStream cluster (ferry relay --declare --stream-replicas 3 declares it so)", name)
	case info.Config.Storage != jetstream.FileStorage:
		d.Level = ferrybroker.DurabilityUnknown
		d.Settings = fmt.Sprintf("%s, storage type %d (neither file nor memory)", base, int(info.Config.Storage))
		d.Fix = weakFix(name)
	case info.Config.PersistMode == jetstream.AsyncPersistMode:
		d.Level = ferrybroker.DurabilityVolatile
		d.Settings = base + ", file storage, async persist mode (a message is acknowledged before it is written: a server crash loses it)"
		d.Fix = fmt.Sprintf("recreate stream %s without async persist mode (the server allows it on 1 replica only), then %s; and %s",
			name, weakFix(name), fsyncFix)
	case replicas >= 3 && (!leader || current <= replicas/2):
		d.Level = ferrybroker.DurabilitySingle
		d.Settings = fmt.Sprintf("%s, file storage (no majority current: it acknowledges nothing until %d of its replicas are, "+
			"and what it acknowledged before is on fewer than %d current ones); %s", base, replicas/2+1, replicas/2+1, fsyncSettings)
		d.Fix = "bring its replicas back"
		if len(behind) > 0 {
			d.Fix += " (" + strings.Join(behind, ", ") + ")"
		}
		d.Fix += "; and " + fsyncFix
	case replicas >= 3:
		d.Level = ferrybroker.DurabilityReplicated
		d.Settings = base + ", file storage; " + fsyncSettings
	case replicas == 2:
		d.Level = ferrybroker.DurabilitySingle
		d.Settings = base + ", file storage (a majority of 2 is 2: an acknowledged message is on both, " +
			"but either one down stops every acknowledgement until the stream is scaled down to 1 replica, so ferry counts it as single); " +
			fsyncSettings
		d.Fix = weakFix(name) + "; and " + fsyncFix
	default:
		d.Level = ferrybroker.DurabilitySingle
		d.Settings = base + ", file storage; " + fsyncSettings
		d.Fix = weakFix(name) + "; and " + fsyncFix
	}
	return d
}

// currentReplicas reads the cluster info of a stream: whether it names a
// leader, how many replicas are current (the leader, and each replica
// the info calls current and not offline), and the names of the others.
func currentReplicas(ci *jetstream.ClusterInfo) (leader bool, current int, behind []string) {
	if ci == nil {
		return false, 0, nil
	}
	if ci.Leader != "" {
		leader, current = true, 1
	}
	for _, r := range ci.Replicas {
		switch {
		case r == nil:
		case r.Current && !r.Offline:
			current++
		default:
			behind = append(behind, r.Name)
		}
	}
	return leader, current, behind
}
