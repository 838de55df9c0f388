package broker

import (
	"fmt"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/sirupsen/logrus"
)

// serverLogger adapts a logrus entry to nats-server's server.Logger.
//
// nats-server calls Fatalf when it cannot go on (a port in use, JetStream
// failing to start) and then stops starting up; its own loggers exit the
// process there. An embedded broker must not exit its host program, so
// Fatalf logs at error level and remembers the first message, which Start
// returns as its error.
type serverLogger struct {
	log *logrus.Entry

	mu    sync.Mutex
	fatal string
}

var _ server.Logger = (*serverLogger)(nil)

func newServerLogger(log *logrus.Entry) *serverLogger {
	return &serverLogger{log: log}
}

// Noticef logs at info level.
func (l *serverLogger) Noticef(format string, v ...any) { l.log.Infof(format, v...) }

// Warnf logs at warning level.
func (l *serverLogger) Warnf(format string, v ...any) { l.log.Warnf(format, v...) }

// Errorf logs at error level.
func (l *serverLogger) Errorf(format string, v ...any) { l.log.Errorf(format, v...) }

// Debugf logs at debug level.
func (l *serverLogger) Debugf(format string, v ...any) { l.log.Debugf(format, v...) }

// Tracef logs at trace level.
func (l *serverLogger) Tracef(format string, v ...any) { l.log.Tracef(format, v...) }

// Fatalf logs at error level, marked fatal, and records the message for
// Start; it does not exit.
func (l *serverLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.mu.Lock()
	if l.fatal == "" {
		l.fatal = msg
	}
	l.mu.Unlock()
	l.log.WithField("fatal", true).Error(msg)
}

// fatalMessage returns the first Fatalf message, or "" when there was none.
func (l *serverLogger) fatalMessage() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatal
}

// levels returns the debug and trace flags for SetLoggerV2, so that
// nats-server does not format messages the entry would drop.
func (l *serverLogger) levels() (debug, trace bool) {
	return l.log.Logger.IsLevelEnabled(logrus.DebugLevel), l.log.Logger.IsLevelEnabled(logrus.TraceLevel)
}
