// Package errs holds what the election's public packages share so that
// their errors match: the errors both streams and standing return, which
// streams exports, and the rule for identities that makes one of them.
package errs

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

var (
	// ErrInvalidIdentity is streams.ErrInvalidIdentity.
	ErrInvalidIdentity = errors.New("election: invalid identity")
	// ErrHandOverRefused is streams.ErrHandOverRefused.
	ErrHandOverRefused = errors.New("election: hand-over refused")
)

// ValidateIdentity returns an error wrapping ErrInvalidIdentity unless
// identity can be a leader's value: not empty, one line, no control
// characters, no leading or trailing spaces.
func ValidateIdentity(identity string) error {
	switch {
	case identity == "":
		return fmt.Errorf("%w: identity is empty: give each candidate a name, such as its host name", ErrInvalidIdentity)
	case strings.IndexFunc(identity, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: identity %q contains control characters", ErrInvalidIdentity, identity)
	case strings.TrimSpace(identity) != identity:
		return fmt.Errorf("%w: identity %q has leading or trailing spaces", ErrInvalidIdentity, identity)
	}
	return nil
}
