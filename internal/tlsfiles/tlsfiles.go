// Package tlsfiles loads the PEM files that the TLS options of a URL name
// (a CA, a client certificate and its key), for every adapter that takes
// such options: ferrymysql's tls-ca, ferrykafka's and the Redis relay's
// tls_ca, and their certificate and key.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Names are the spellings of the three options in a URL, for errors:
// {"tls_ca", "tls_cert", "tls_key"}, say.
type Names struct{ CA, Cert, Key string }

// Apply sets c.RootCAs from the PEM file ca and c.Certificates from the
// PEM files cert and key; an empty name leaves its part alone. A
// certificate without its key, or the reverse, is an error, as is a CA
// file holding no certificate. Errors name the option, not the contents.
func Apply(c *tls.Config, ca, cert, key string, n Names) error {
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return fmt.Errorf("%s: %v", n.CA, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s %s holds no PEM certificate", n.CA, ca)
		}
		c.RootCAs = pool
	}
	switch {
	case cert != "" && key != "":
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return fmt.Errorf("%s/%s: %v", n.Cert, n.Key, err)
		}
		c.Certificates = []tls.Certificate{pair}
	case cert != "" || key != "":
		return fmt.Errorf("%s and %s go together", n.Cert, n.Key)
	}
	return nil
}
