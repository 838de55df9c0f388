package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
)

// natsContext is a NATS CLI context: a JSON file the `nats context` commands
// write under $XDG_CONFIG_HOME/nats/context (or ~/.config/nats/context).
// Only the fields conclave uses are decoded; the others are reported as
// ignored when they are set.
type natsContext struct {
	URL         string `json:"url"`
	User        string `json:"user"`
	Password    string `json:"password"`
	Token       string `json:"token"`
	Creds       string `json:"creds"`
	NKey        string `json:"nkey"`
	UserJWT     string `json:"user_jwt"`
	UserSeed    string `json:"user_seed"`
	Cert        string `json:"cert"`
	Key         string `json:"key"`
	CA          string `json:"ca"`
	TLSFirst    bool   `json:"tls_first"`
	InboxPrefix string `json:"inbox_prefix"`
	JSDomain    string `json:"jetstream_domain"`
	JSAPIPrefix string `json:"jetstream_api_prefix"`

	name    string   // the context's name
	path    string   // the file it was read from
	source  string   // how the context was chosen, for messages
	ignored []string // settings it has that conclave does not use
}

// usedContextFields are the JSON fields natsContext decodes, and
// harmlessContextFields those conclave may ignore without changing where or
// how it connects.
var (
	usedContextFields = []string{"url", "user", "password", "token", "creds", "nkey", "user_jwt", "user_seed",
		"cert", "key", "ca", "tls_first", "inbox_prefix", "jetstream_domain", "jetstream_api_prefix"}
	harmlessContextFields = []string{"name", "description", "color_scheme", "jetstream_event_prefix"}
)

// natsConfigDir is the NATS CLI's configuration directory: $XDG_CONFIG_HOME/nats,
// else ~/.config/nats, or "" when neither can be told.
func natsConfigDir(env func(string) string) string {
	if dir := env("XDG_CONFIG_HOME"); dir != "" {
		return filepath.Join(dir, "nats")
	}
	home := env("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	if home == "" {
		return ""
	}
	return filepath.Join(home, ".config", "nats")
}

// selectedNATSContext returns the context `nats context select` chose (the
// name in context.txt), or "" when none is.
func selectedNATSContext(dir string) (string, error) {
	if dir == "" {
		return "", nil
	}
	raw, err := os.ReadFile(filepath.Join(dir, "context.txt"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading the NATS CLI's selected context: %w", err)
	}
	return strings.TrimSpace(string(raw)), nil
}

// loadNATSContext reads context name from dir/context/name.json. Paths in it
// may start with ~ and name environment variables, as the NATS CLI allows.
func loadNATSContext(dir, name string, env func(string) string) (*natsContext, error) {
	if name == "" || strings.Contains(name, "..") || strings.ContainsAny(name, `/\`) {
		return nil, fmt.Errorf("%q is not a context name: use the name `nats context ls` shows", name)
	}
	if dir == "" {
		return nil, errors.New("cannot find the NATS CLI's configuration: set XDG_CONFIG_HOME or HOME")
	}
	path := filepath.Join(dir, "context", name+".json")
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no such context: %s does not exist; `nats context ls` lists the contexts", path)
	}
	if err != nil {
		return nil, err
	}
	c := &natsContext{name: name, path: path}
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, fmt.Errorf("%s is not a NATS context file: %w", path, err)
	}
	var all map[string]any
	if err := json.Unmarshal(raw, &all); err == nil {
		for _, field := range ignoredFields(all) {
			c.ignored = append(c.ignored, fmt.Sprintf("context %q sets %s, which conclave does not support: it is ignored", name, field))
		}
	}
	for _, p := range []*string{&c.Creds, &c.NKey, &c.Cert, &c.Key, &c.CA} {
		*p = expandPath(*p, env)
	}
	return c, nil
}

// ignoredFields lists the fields of a context that are set to something and
// that conclave does not use, sorted.
func ignoredFields(all map[string]any) []string {
	var out []string
	for field, v := range all {
		if slices.Contains(usedContextFields, field) || slices.Contains(harmlessContextFields, field) {
			continue
		}
		switch v := v.(type) {
		case nil:
			continue
		case string:
			if v == "" {
				continue
			}
		case bool:
			if !v {
				continue
			}
		case []any:
			if len(v) == 0 {
				continue
			}
		}
		out = append(out, field)
	}
	slices.Sort(out)
	return out
}

// expandPath expands environment variables and a leading ~ in a path.
func expandPath(p string, env func(string) string) string {
	if p == "" {
		return ""
	}
	p = os.Expand(p, env)
	if p == "~" || strings.HasPrefix(p, "~/") {
		home := env("HOME")
		if home == "" {
			home, _ = os.UserHomeDir()
		}
		p = home + p[1:]
	}
	return p
}

// options returns the nats.Connect options for the context's credentials,
// other than its creds file, and its TLS settings.
func (c *natsContext) options() []nats.Option {
	var opts []nats.Option
	switch {
	case c.User != "":
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	case c.Token != "":
		opts = append(opts, nats.Token(c.Token))
	}
	if c.NKey != "" {
		opts = append(opts, nkeyOption(c.NKey))
	}
	if c.UserJWT != "" && c.UserSeed != "" {
		opts = append(opts, nats.UserJWTAndSeed(c.UserJWT, c.UserSeed))
	}
	if c.Cert != "" && c.Key != "" {
		opts = append(opts, nats.ClientCert(c.Cert, c.Key))
	}
	if c.CA != "" {
		opts = append(opts, nats.RootCAs(c.CA))
	}
	if c.TLSFirst {
		opts = append(opts, nats.TLSHandshakeFirst())
	}
	if c.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.InboxPrefix))
	}
	return opts
}

// nkeyOption authenticates with the seed in file path; a file that cannot be
// read makes the connection fail with the reason.
func nkeyOption(path string) nats.Option {
	return func(o *nats.Options) error {
		opt, err := nats.NkeyOptionFromSeed(path)
		if err != nil {
			return fmt.Errorf("nkey %s: %w", path, err)
		}
		return opt(o)
	}
}
