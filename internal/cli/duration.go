package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/pflag"
)

// durationValue is a duration flag that, as the configuration files do,
// takes whole seconds ("5") as well as Go durations ("5s", "1m30s").
type durationValue time.Duration

var _ pflag.Value = (*durationValue)(nil)

func (d *durationValue) Set(s string) error {
	if n, err := strconv.ParseInt(s, 10, 32); err == nil {
		*d = durationValue(time.Duration(n) * time.Second)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration: use whole seconds such as 5, or a Go duration such as 500ms, 30s or 1m30s", s)
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
}
