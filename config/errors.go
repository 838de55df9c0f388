package config

import (
	"errors"
	"fmt"
	"strconv"
)

// Sentinel errors. Every error this package returns for a bad configuration
// matches one of them with errors.Is; the message itself names the file, line,
// key or variable and says what would be valid.
var (
	// ErrSyntax is a line that is not "key = value": no "=", or nothing before it.
	ErrSyntax = errors.New("config: syntax error")
	// ErrUnknownKey is a key this package does not read.
	ErrUnknownKey = errors.New("config: unknown key")
	// ErrDuplicateKey is a key set more than once in the same file.
	ErrDuplicateKey = errors.New("config: duplicate key")
	// ErrInvalidValue is a value that does not parse, or is out of range, for its key.
	ErrInvalidValue = errors.New("config: invalid value")
	// ErrInvalid is a configuration that Validate rejects: a field out of range,
	// or settings that do not work together.
	ErrInvalid = errors.New("config: invalid configuration")
)

// LineError is a problem with one line of a configuration file. Errors returned
// by Parse and Load for file content are *LineError values, joined with
// errors.Join when there are several.
type LineError struct {
	// File is the name given to Parse, or the path given to Load.
	File string
	// Line is the 1-based line number.
	Line int
	// Key is the key on the line; empty when the line has none.
	Key string
	// Err says what is wrong; it matches ErrSyntax, ErrUnknownKey,
	// ErrDuplicateKey or ErrInvalidValue.
	Err error
}

// Error formats the error as "file:line: key: problem".
func (e *LineError) Error() string {
	where := e.File + ":" + strconv.Itoa(e.Line)
	if e.Key == "" {
		return where + ": " + e.Err.Error()
	}
	return where + ": " + e.Key + ": " + e.Err.Error()
}

// Unwrap returns Err.
func (e *LineError) Unwrap() error { return e.Err }

// EnvError is a bad value in an environment override (see Key.Env).
type EnvError struct {
	// Var is the environment variable, e.g. CONCLAVE_IDENTITY.
	Var string
	// Key is the configuration key the variable overrides.
	Key string
	// Err says what is wrong; it matches ErrInvalidValue.
	Err error
}

// Error formats the error as "$VAR: key: problem".
func (e *EnvError) Error() string {
	return "$" + e.Var + ": " + e.Key + ": " + e.Err.Error()
}

// Unwrap returns Err.
func (e *EnvError) Unwrap() error { return e.Err }

// problem is an error whose message is exactly msg and which matches the
// sentinel kind, so that messages read "file:7: key: problem" rather than
// repeating the sentinel's text.
type problem struct {
	kind error
	msg  string
}

func (p *problem) Error() string { return p.msg }
func (p *problem) Unwrap() error { return p.kind }

// newProblem returns an error matching kind with a formatted message.
func newProblem(kind error, format string, args ...any) error {
	return &problem{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// invalidf returns an error matching ErrInvalidValue.
func invalidf(format string, args ...any) error {
	return newProblem(ErrInvalidValue, format, args...)
}
