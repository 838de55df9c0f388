// Package fwhook lets the module's own packages give a conclave.Framework
// settings that package conclave does not offer as public options.
// conclavetest uses it to log to t.Log unless the test's options name a
// logger.
package fwhook

import "github.com/sirupsen/logrus"

// DefaultLogger is set by package conclave as it is initialised. It returns
// a conclave.Option (as any: this package cannot name the type) that makes
// the framework log through l unless its other options give
// conclave.WithLogger or conclave.WithSlog.
var DefaultLogger func(l *logrus.Logger) any
