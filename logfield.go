package conclave

import "github.com/sirupsen/logrus"

// fieldLogger logs through base with one field added to each entry as it
// is written. An election's logger is one: thousands of elections then
// share their component's entry instead of each holding a copy of its
// fields, and an entry is built only for a level that is logged.
type fieldLogger struct {
	base         *logrus.Entry
	field, value string
}

func (l fieldLogger) Debugf(format string, args ...any) { l.logf(logrus.DebugLevel, format, args) }
func (l fieldLogger) Infof(format string, args ...any)  { l.logf(logrus.InfoLevel, format, args) }
func (l fieldLogger) Warnf(format string, args ...any)  { l.logf(logrus.WarnLevel, format, args) }
func (l fieldLogger) Errorf(format string, args ...any) { l.logf(logrus.ErrorLevel, format, args) }

func (l fieldLogger) logf(level logrus.Level, format string, args []any) {
	if !l.base.Logger.IsLevelEnabled(level) {
		return
	}
	l.base.WithField(l.field, l.value).Logf(level, format, args...)
}
