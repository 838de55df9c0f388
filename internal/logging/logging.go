// Package logging builds the logrus logger a configuration asks for.
package logging

import (
	"fmt"
	"io"
	"os"

	"github.com/sirupsen/logrus"

	"github.com/conclave-io/conclave/config"
)

// New returns a logger at cfg's level writing to cfg's log file, or to
// stderr when none is set, and a function that closes the file.
func New(cfg *config.Config, stderr io.Writer) (*logrus.Logger, func() error, error) {
	l := logrus.New()
	l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: "2006-01-02 15:04:05.000"})
	level := cfg.LogLevel
	if level == "" {
		level = "info"
	}
	lvl, err := logrus.ParseLevel(level)
	if err != nil {
		return nil, nil, fmt.Errorf("loglevel %q: %w", cfg.LogLevel, err)
	}
	l.SetLevel(lvl)
	closer := func() error { return nil }
	if cfg.LogFile == "" {
		l.SetOutput(stderr)
		return l, closer, nil
	}
	f, err := os.OpenFile(cfg.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, nil, fmt.Errorf("logfile: %w: set logfile to a writable path, or leave it empty for standard error", err)
	}
	l.SetOutput(f)
	return l, f.Close, nil
}
