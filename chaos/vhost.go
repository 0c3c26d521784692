package chaos

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// EnvRabbitMQAPI names the base URL of the shared RabbitMQ server's
// management HTTP API (default: http://<the broker's host>:15672, with the
// broker URL's user). The chaos harness creates and deletes each run's
// virtual host through it when it answers, and through rabbitmqctl when
// it does not: each rabbitmqctl run boots an Erlang VM (a second of CPU,
// several seconds of wall time on a loaded machine), three times a run.
// On a node of the run's own (Options.AMQPNode) it uses rabbitmqctl -n:
// that node has no management plugin, and the API at the default address
// is the shared server's.
const EnvRabbitMQAPI = "FERRY_TEST_RABBITMQ_API"

// vhostAdmin creates a virtual host the broker URL's user may use, and
// deletes it.
type vhostAdmin struct {
	api  *url.URL // nil: rabbitmqctl
	node string   // rabbitmqctl -n; empty, its default node
	user string
}

func newVhostAdmin(broker *url.URL, node string) vhostAdmin {
	a := vhostAdmin{user: broker.User.Username(), node: node}
	if node != "" {
		return a
	}
	base := os.Getenv(EnvRabbitMQAPI)
	if base == "" {
		base = "http://" + net.JoinHostPort(broker.Hostname(), "15672")
	}
	api, err := url.Parse(base)
	if err != nil || api.Host == "" {
		return a
	}
	if api.User == nil {
		api.User = broker.User
	}
	// Only an API that answers, and answers as the management API does,
	// is used; otherwise rabbitmqctl.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := a.call(ctx, api, http.MethodGet, "/api/whoami", ""); err == nil {
		a.api = api
	}
	return a
}

func (a vhostAdmin) add(ctx context.Context, vhost string) error {
	if a.api == nil {
		if _, err := rabbitmqctl(ctx, a.node, "add_vhost", vhost); err != nil {
			return err
		}
		_, err := rabbitmqctl(ctx, a.node, "set_permissions", "-p", vhost, a.user, ".*", ".*", ".*")
		return err
	}
	if err := a.call(ctx, a.api, http.MethodPut, "/api/vhosts/"+url.PathEscape(vhost), ""); err != nil {
		return err
	}
	return a.call(ctx, a.api, http.MethodPut, "/api/permissions/"+url.PathEscape(vhost)+"/"+url.PathEscape(a.user),
		`{"configure":".*","write":".*","read":".*"}`)
}

func (a vhostAdmin) delete(ctx context.Context, vhost string) error {
	if a.api == nil {
		_, err := rabbitmqctl(ctx, a.node, "delete_vhost", vhost)
		return err
	}
	return a.call(ctx, a.api, http.MethodDelete, "/api/vhosts/"+url.PathEscape(vhost), "")
}

func (a vhostAdmin) call(ctx context.Context, api *url.URL, method, path, body string) error {
	u := *api
	u.User = nil
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawPath = ""
	req, err := http.NewRequestWithContext(ctx, method, u.String(), strings.NewReader(body))
	if err != nil {
		return err
	}
	pw, _ := api.User.Password()
	req.SetBasicAuth(api.User.Username(), pw)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("RabbitMQ management API: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("RabbitMQ management API: %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}
