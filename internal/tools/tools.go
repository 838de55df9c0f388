//go:build tools

// Package tools pins dependencies during development.
package tools

import (
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/sirupsen/logrus"
	_ "github.com/spf13/cobra"
	_ "go.uber.org/goleak"
)
