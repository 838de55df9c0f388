package cli

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/conclave-io/conclave/config"
)

// durationValue is a duration flag that takes what the configuration files
// take (config.ParseDuration): whole seconds ("5") as well as Go durations
// ("5s", "1m30s").
type durationValue time.Duration

var _ pflag.Value = (*durationValue)(nil)

func (d *durationValue) Set(s string) error {
	v, err := config.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) String() string { return time.Duration(*d).String() }
func (d *durationValue) Type() string   { return "duration" }

// durationVar defines a duration flag that takes whole seconds too.
func durationVar(fs *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage)
	if value == 0 {
		// pflag shows a default unless it reads as zero, and "0s" does
		// not for a Value of its own: a zero default goes unsaid, as for
		// its own durations, and the usage says what 0 means.
		fs.Lookup(name).DefValue = "0"
	}
}
