package testsvc

import (
	"net/url"
	"testing"

	"github.com/ferrydev/ferry/internal/faultnet"
)

// Proxy starts a TCP proxy to the host:port of the service URL rawURL and
// returns the same URL pointing at the proxy. The test cuts and restores
// the proxy to make the service unreachable without stopping it for the
// other tests; the proxy is closed when the test ends.
func Proxy(t testing.TB, rawURL string) (string, *faultnet.Proxy) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("proxy: parse service URL: %v", err)
	}
	p, err := faultnet.Listen(u.Host)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	u.Host = p.Addr()
	return u.String(), p
}
