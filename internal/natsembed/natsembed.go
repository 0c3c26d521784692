// Package natsembed runs a NATS server with JetStream inside the process,
// on a random loopback port, for the zero-setup demo, the examples and the
// tests.
package natsembed

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Start starts a server storing JetStream data under dir. Shut it down with
// Shutdown and WaitForShutdown.
func Start(dir string) (*server.Server, error) {
	s, err := server.NewServer(&server.Options{
		ServerName: "ferry-embedded",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   dir,
		NoSigs:     true,
		NoLog:      true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats-server did not start within 10s")
	}
	return s, nil
}
