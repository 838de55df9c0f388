package config

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/conclave-io/conclave/internal/suggest"
)

// maxLine is the longest line Parse reads.
const maxLine = 1 << 20

// Load reads the configuration file at path, applies the environment
// overrides from os.LookupEnv, and validates the result; see LoadWithEnv.
func Load(path string) (*Config, error) {
	return LoadWithEnv(path, os.LookupEnv)
}

// LoadWithEnv is Load with the environment read through lookup (os.LookupEnv
// in production; nil means no overrides). The returned Config has Path set.
// A file that cannot be opened yields the *fs.PathError, wrapped; problems in
// the file are as for ParseWithEnv.
func LoadWithEnv(path string, lookup func(string) (string, bool)) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	c, err := ParseWithEnv(f, path, lookup)
	if err != nil {
		return nil, err
	}
	c.Path = path
	return c, nil
}

// Parse reads a configuration from r, applies the environment overrides from
// os.LookupEnv, and validates the result; see ParseWithEnv.
func Parse(r io.Reader, name string) (*Config, error) {
	return ParseWithEnv(r, name, os.LookupEnv)
}

// ParseWithEnv reads a configuration from r on top of Default, then applies
// the environment overrides found through lookup (nil means none; see
// Key.Env), then calls Validate. name is used in error messages.
//
// Every problem in the file and the environment is reported, joined with
// errors.Join: *LineError values matching ErrSyntax, ErrUnknownKey,
// ErrDuplicateKey or ErrInvalidValue, and *EnvError values matching
// ErrInvalidValue. Validate runs only when there are none, so that a bad value
// does not also show up as a confusing cross-field error; its errors match
// ErrInvalid. On error the Config is nil.
func ParseWithEnv(r io.Reader, name string, lookup func(string) (string, bool)) (*Config, error) {
	c := Default()
	keys := Keys()
	errs := parseLines(r, name, c, keys)
	errs = append(errs, applyEnv(c, keys, lookup)...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := c.validate(name); err != nil {
		return nil, err
	}
	return c, nil
}

// FromEnv returns the defaults with the environment overrides found through
// lookup (os.LookupEnv in production), validated: the configuration to run on
// when FindUserConfig finds no file. Errors are as for ParseWithEnv.
func FromEnv(lookup func(string) (string, bool)) (*Config, error) {
	return ParseWithEnv(strings.NewReader(""), "", lookup)
}

// parseLines applies every "key = value" line of r to c and returns every
// problem found.
func parseLines(r io.Reader, name string, c *Config, keys []Key) []error {
	index := keyIndex(keys)
	firstSeen := map[string]int{}
	var errs []error
	scanner := bufio.NewScanner(r)
	scanner.Buffer(nil, maxLine)
	for n := 1; scanner.Scan(); n++ {
		line := scanner.Text()
		if n == 1 {
			line = strings.TrimPrefix(line, "\ufeff")
		}
		key, err := parseLine(line, c, index, firstSeen, n)
		if err != nil {
			errs = append(errs, &LineError{File: name, Line: n, Key: key, Err: err})
		}
	}
	if err := scanner.Err(); err != nil {
		errs = append(errs, fmt.Errorf("config: reading %s: %w", name, err))
	}
	return errs
}

// parseLine applies one line to c. It returns the line's key (empty for blank
// lines, comments and lines without a key) and what is wrong with the line.
// firstSeen records the line each key was first set on.
func parseLine(line string, c *Config, index map[string]Key, firstSeen map[string]int, n int) (string, error) {
	line = strings.TrimSpace(line)
	if line == "" || strings.HasPrefix(line, "#") {
		return "", nil
	}
	name, value, ok := strings.Cut(line, "=")
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	switch {
	case !ok:
		return "", newProblem(ErrSyntax, "%s is not a \"key = value\" line: write key = value, or start the line with # to make it a comment", quoteShort(line))
	case name == "":
		return "", newProblem(ErrSyntax, "%s has no key before \"=\": write key = value", quoteShort(line))
	}
	k, known := index[name]
	var user string
	if !known || k.perUser {
		var isUserKey bool
		var err error
		k, user, isUserKey, err = parseUserKey(name, userFieldIndex())
		switch {
		case !isUserKey:
			return name, unknownKey(name, index)
		case err != nil:
			return name, err
		}
	}
	if first, dup := firstSeen[name]; dup {
		return name, newProblem(ErrDuplicateKey, "set again, first set on line %d: keep only one of them", first)
	}
	firstSeen[name] = n
	if user != "" {
		return name, c.setUserField(k, user, value)
	}
	return name, k.set(c, value)
}

// unknownKey describes an unknown key, suggesting the nearest known one.
func unknownKey(name string, index map[string]Key) error {
	if s := suggest.Nearest(name, slices.Sorted(maps.Keys(index))); s != "" {
		return newProblem(ErrUnknownKey, "unknown key: did you mean %s?", s)
	}
	return newProblem(ErrUnknownKey, "unknown key: remove it, or use one of the keys in conclave's configuration reference (https://github.com/conclave-io/conclave/blob/main/docs/config.md)")
}

// applyEnv applies every environment override found through lookup.
func applyEnv(c *Config, keys []Key, lookup func(string) (string, bool)) []error {
	if lookup == nil {
		return nil
	}
	var errs []error
	for _, k := range keys {
		if k.perUser {
			continue
		}
		v, ok := lookup(k.Env())
		v = strings.TrimSpace(v)
		if !ok || v == "" {
			continue
		}
		if err := k.set(c, v); err != nil {
			errs = append(errs, &EnvError{Var: k.Env(), Key: k.Name, Err: err})
		}
	}
	return errs
}

// quoteShort quotes s for an error message, shortened when long.
func quoteShort(s string) string {
	const limit = 60
	if r := []rune(s); len(r) > limit {
		return strconv.Quote(string(r[:limit])) + "…"
	}
	return strconv.Quote(s)
}

// setUserField sets one field of the broker user named user, creating it.
func (c *Config) setUserField(k Key, user, value string) error {
	u := c.Users[user]
	if u == nil {
		u = &User{Name: user}
	}
	if err := k.setUser(u, value); err != nil {
		return err
	}
	if c.Users == nil {
		c.Users = map[string]*User{}
	}
	c.Users[user] = u
	return nil
}
