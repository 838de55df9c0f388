package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/conclave-io/conclave/acl"
	"github.com/conclave-io/conclave/config"
	"github.com/conclave-io/conclave/internal/natsconn"
	"github.com/conclave-io/conclave/internal/suggest"
)

// defaultURL is where the commands look for a broker when nothing else says
// where: a Conclave broker's default client port on this host.
const defaultURL = "nats://127.0.0.1:4222"

// defaultTimeout bounds connecting and each request to the broker.
const defaultTimeout = 5 * time.Second

// Environment variables the connection flags fall back to, as the NATS CLI
// names them.
const (
	envURL      = "NATS_URL"
	envCreds    = "NATS_CREDS"
	envContext  = "NATS_CONTEXT"
	envUser     = "NATS_USER"
	envPassword = "NATS_PASSWORD"
	envNKey     = "NATS_NKEY"
	envCert     = "NATS_CERT"
	envKey      = "NATS_KEY"
	envCA       = "NATS_CA"
)

// connFlags are the NATS connection flags, named as the NATS CLI names them.
type connFlags struct {
	config  string
	server  string
	creds   string
	context string
	timeout time.Duration
	// The NATS CLI's login and TLS flags; each falls back to its NATS_*
	// variable, and both win over a context's setting.
	user, password, token, nkey string
	tlsCert, tlsKey, tlsCA      string
	noContext                   bool

	// lookupEnv reads the environment; nil means os.LookupEnv. Tests replace it.
	lookupEnv func(string) (string, bool)
}

// register adds the flags to fs, meant to be the root's persistent flags.
func (f *connFlags) register(fs *pflag.FlagSet) {
	fs.StringVarP(&f.server, "server", "s", "", "NATS server `URLS`, comma separated; without it: --context's url, --config's hosts, $"+envURL+", the selected NATS context's url, "+defaultURL)
	fs.StringVar(&f.creds, "creds", "", "NATS credentials `FILE`; without it: --context's, $"+envCreds+", the selected NATS context's")
	fs.StringVar(&f.context, "context", "", "`NAME` of the NATS CLI context to connect with; without it and a configuration file (--config, or one found as --config says): $"+envContext+", else the NATS CLI's selected context")
	fs.StringVar(&f.config, "config", "", "Conclave or Choria configuration `FILE` (key = value lines): the broker's for broker run; for the other commands, connect to its plugin.choria.middleware_hosts, or to the broker it configures, with its TLS and login settings; without it: $"+config.EnvConfig+", else ./conclave.conf, ~/.config/conclave/conclave.conf, /etc/conclave/conclave.conf (unless a NATS context is named)")
	durationVar(fs, &f.timeout, "timeout", defaultTimeout, "how long to wait for the broker to connect and to answer each request")
	fs.StringVar(&f.user, "user", "", "user name to log in with (else $"+envUser+", else the context's)")
	fs.StringVar(&f.password, "password", "", "password to log in with (else $"+envPassword+", else the context's)")
	fs.StringVar(&f.token, "token", "", "token to log in with")
	fs.StringVar(&f.nkey, "nkey", "", "NKey seed `FILE` to log in with (else $"+envNKey+")")
	fs.StringVar(&f.tlsCert, "tlscert", "", "client certificate `FILE` for TLS (else $"+envCert+")")
	fs.StringVar(&f.tlsKey, "tlskey", "", "client certificate's key `FILE` (else $"+envKey+")")
	fs.StringVar(&f.tlsCA, "tlsca", "", "CA certificate `FILE` to verify the broker with (else $"+envCA+")")
	fs.BoolVar(&f.noContext, "no-context", false, "ignore the NATS CLI's selected context and $"+envContext)
}

// pick returns the flag's value, else the environment variable's.
func (f *connFlags) pick(flag, env string) string {
	if flag != "" {
		return flag
	}
	return f.env(env)
}

// loginOptions returns the options of the NATS CLI's login and TLS flags
// and variables, and checks they make sense together. It also returns the
// user they log in as, if any, and whether they give a client certificate.
func (f *connFlags) loginOptions() (opts []nats.Option, user string, cert bool, err error) {
	opts, err = f.loginOptionsOnly()
	return opts, f.pick(f.user, envUser), f.pick(f.tlsCert, envCert) != "", err
}

func (f *connFlags) loginOptionsOnly() ([]nats.Option, error) {
	var opts []nats.Option
	user, password := f.pick(f.user, envUser), f.pick(f.password, envPassword)
	switch {
	case user != "" && f.token != "":
		return nil, errors.New("--user and --token both log in: pass one of them")
	case user != "":
		opts = append(opts, nats.UserInfo(user, password))
	case password != "":
		return nil, errors.New("a password (--password or $" + envPassword + ") without a user: pass --user too")
	case f.token != "":
		opts = append(opts, nats.Token(f.token))
	}
	if nkey := f.pick(f.nkey, envNKey); nkey != "" {
		opts = append(opts, nkeyOption(nkey))
	}
	cert, key := f.pick(f.tlsCert, envCert), f.pick(f.tlsKey, envKey)
	switch {
	case (cert == "") != (key == ""):
		return nil, errors.New("--tlscert and --tlskey go together (or $" + envCert + " and $" + envKey + "): pass both")
	case cert != "":
		opts = append(opts, nats.ClientCert(cert, key))
	}
	if ca := f.pick(f.tlsCA, envCA); ca != "" {
		opts = append(opts, nats.RootCAs(ca))
	}
	return opts, nil
}

func (f *connFlags) env(name string) string {
	v, _ := f.lookup()(name)
	return strings.TrimSpace(v)
}

// target is where and how to connect, resolved from the flags, the
// environment, a NATS context and a configuration file.
type target struct {
	// urls are the servers, comma separated as nats.Connect takes them.
	urls string
	// source says where urls came from, for messages.
	source string
	// hint says how to point the command elsewhere when nothing answers.
	hint string
	// ctx is the NATS context used, if any.
	ctx *natsContext
	// creds is the credentials file, if any, and where it came from.
	creds, credsSource string
	// warnings are settings that were ignored, to show the user.
	warnings []string
	// cfg is the configuration file's configuration (--config, else the
	// file config.FindUserConfig finds), whose TLS and login settings the
	// connection uses; nil without one. cfgName names it for messages.
	cfg     *config.Config
	cfgName string
	// cfgFound: the file was found (config.FindUserConfig), not given.
	cfgFound bool
	// cfgEnv: there is no file, and cfg is the defaults with the
	// CONCLAVE_* variables set (config.FromEnv), as a program without a
	// file runs on.
	cfgEnv bool
	// login are the options of the NATS CLI's login and TLS flags and
	// variables, applied last so that they win.
	login []nats.Option
	// user is the user --user or $NATS_USER logs in as; clientCert tells
	// whether --tlscert or $NATS_CERT gives a client certificate.
	user       string
	clientCert bool
	// token tells whether --token logs in; nkey is the NKey seed file
	// --nkey or $NATS_NKEY gives, if any.
	token bool
	nkey  string
	// tlsCert, tlsKey and tlsCA are the TLS files --tlscert, --tlskey and
	// --tlsca (or their variables) give, if any.
	tlsCert, tlsKey, tlsCA string
}

// who names the user the connection logs in as and where that login came
// from, for the errors of a refused request: "the user "app-a" (plugin.nats.user
// in ./conclave.conf, …)"; "this user" when nothing names one.
func (t *target) who() string {
	switch {
	case t.user != "":
		return fmt.Sprintf("the user %q (--user or $%s)", t.user, envUser)
	case t.creds != "":
		return fmt.Sprintf("the user of the credentials file %s (%s)", t.creds, t.credsSource)
	case t.ctx != nil && t.ctx.User != "":
		return fmt.Sprintf("the user %q (%s)", t.ctx.User, t.ctx.source)
	case t.cfg != nil && (t.cfg.NATSUser != "" || t.cfg.NATSCredentials != ""):
		name := t.cfg.NATSUser
		if name == "" {
			name = "of " + t.cfg.NATSCredentials
		} else {
			name = strconv.Quote(name)
		}
		from := t.cfgName // "--config FILE"
		switch {
		case t.cfgEnv:
			from = t.cfgName + ": they log in even with --server; unset them, or pass --user, for another login"
		case t.cfgFound:
			from = t.cfgName + ", the configuration file found as --config was not given: it logs in even with --server; pass --config, or --user, for another login"
		}
		return fmt.Sprintf("the user %s (logged in by %s)", name, from)
	}
	return "this user"
}

// resolve works out the target. Explicit flags win over environment
// variables, which win over the NATS CLI's selected context, which wins over
// the default. For the server URLs, the first of these that is set wins:
//
//  1. --server;
//  2. --context NAME: the context's url;
//  3. --config FILE: its plugin.choria.middleware_hosts, else, for a broker's
//     own configuration, the address it listens on; without --config, the
//     file config.FindUserConfig finds, else the CONCLAVE_* variables on the
//     defaults (config.FromEnv), as a program reads them;
//  4. $NATS_URL;
//  5. the url of the context $NATS_CONTEXT names, else of the NATS CLI's
//     selected context (context.txt), unless --context or --config is given;
//  6. nats://127.0.0.1:4222.
//
// The credentials file is --creds, else --context's, else $NATS_CREDS, else
// that of the context of step 5. The context in use (step 2 or 5) also gives
// its other credentials and TLS settings. Giving both --context and --config
// is an error: both say where to connect.
func (f *connFlags) resolve() (*target, error) {
	if f.context != "" && f.config != "" {
		return nil, fmt.Errorf("both --context %q and --config %q say where to connect: pass only one of them", f.context, f.config)
	}
	if f.context != "" && f.noContext {
		return nil, fmt.Errorf("--context %q and --no-context contradict each other: pass one of them", f.context)
	}
	login, user, cert, err := f.loginOptions()
	if err != nil {
		return nil, err
	}
	t := &target{login: login, user: user, clientCert: cert, token: f.token != "", nkey: f.pick(f.nkey, envNKey),
		tlsCert: f.pick(f.tlsCert, envCert), tlsKey: f.pick(f.tlsKey, envKey), tlsCA: f.pick(f.tlsCA, envCA)}
	// The configuration file: --config, else the one programs and brokers
	// read (config.FindUserConfig: $CONCLAVE_CONFIG, ./conclave.conf, …),
	// unless --context says where to connect.
	lookup := f.lookup()
	cfgPath, cfgName := f.config, "--config "+f.config
	if cfgPath == "" && f.context == "" {
		if p := config.FindUserConfigWithEnv(lookup); p != "" {
			cfgPath, cfgName = p, p
			if v, _ := lookup(config.EnvConfig); v != "" {
				cfgName = "$" + config.EnvConfig + " " + p
			}
		}
	}
	dir := natsConfigDir(f.env)
	var explicit, implicit *natsContext
	switch {
	case f.context != "":
		c, err := loadNATSContext(dir, f.context, f.env)
		if err != nil {
			return nil, fmt.Errorf("--context %q: %w", f.context, err)
		}
		c.source = "NATS context " + strconv.Quote(c.name)
		explicit = c
	case cfgPath != "":
		// A configuration file says where to connect: no context.
	case f.noContext:
		// Asked for: no context at all.
	case f.env(envContext) != "":
		name := f.env(envContext)
		c, err := loadNATSContext(dir, name, f.env)
		if err != nil {
			return nil, fmt.Errorf("$%s %q: %w", envContext, name, err)
		}
		c.source = "NATS context " + strconv.Quote(name) + " (from $" + envContext + ")"
		implicit = c
	default:
		name, err := selectedNATSContext(dir)
		if err != nil {
			return nil, err
		}
		if name != "" {
			c, err := loadNATSContext(dir, name, f.env)
			if err != nil {
				return nil, fmt.Errorf("the NATS CLI's selected context %q: %w: select another with `nats context select NAME`, or pass --server", name, err)
			}
			c.source = "the selected NATS context " + strconv.Quote(name)
			implicit = c
		}
	}
	t.ctx = explicit
	if t.ctx == nil {
		t.ctx = implicit
	}
	if t.ctx != nil {
		t.warnings = append(t.warnings, t.ctx.ignored...)
	}

	if cfgPath != "" {
		// The file's TLS, login and identity apply even when --server
		// says where to connect.
		cfg, err := loadClientConfig(cfgPath, cfgName, f.lookupEnv)
		if err != nil {
			return nil, err
		}
		t.cfg, t.cfgName, t.cfgFound = cfg, cfgName, f.config == ""
	}
	if vars := configVarsSet(lookup); cfgPath == "" && f.context == "" && len(vars) > 0 {
		// No file: the defaults with the CONCLAVE_* variables, which a
		// program without a file runs on (conclave.New("")), checked
		// as it checks them.
		cfg, err := config.FromEnv(lookup)
		if err != nil {
			return nil, fmt.Errorf("the environment (no configuration file was found): %w", err)
		}
		t.cfg, t.cfgName, t.cfgEnv = cfg, "$"+strings.Join(vars, ", $"), true
	}

	const startHint = "start one with `conclave broker run --config FILE`"
	switch {
	case f.server != "":
		t.urls, t.source, t.hint = f.server, "--server", "check the address, or "+startHint
	case explicit != nil && explicit.URL != "":
		t.urls, t.source, t.hint = explicit.URL, explicit.source, "check the url in "+explicit.path+", or pass --server"
	case t.cfg != nil && (f.config != "" || len(t.cfg.MiddlewareHosts) > 0 || t.cfg.BrokerNetwork):
		// A file found rather than given (or the environment) that names
		// no broker says nothing about where to connect: the later steps
		// decide, as a program on that file connects to the default.
		urls, err := configURLs(t.cfg, t.cfgName)
		if err != nil {
			return nil, err
		}
		in := "in " + cfgPath
		if t.cfgEnv {
			in = "($" + config.EnvPrefix + "PLUGIN_CHORIA_MIDDLEWARE_HOSTS)"
		}
		t.urls, t.source, t.hint = strings.Join(urls, ","), t.cfgName, "check plugin.choria.middleware_hosts "+in+", or pass --server"
	case f.env(envURL) != "":
		t.urls, t.source, t.hint = f.env(envURL), "$"+envURL, "check $"+envURL+", or "+startHint
	case implicit != nil && implicit.URL != "":
		t.urls, t.source, t.hint = implicit.URL, implicit.source, "check the url in "+implicit.path+", select another context with `nats context select NAME`, or pass --server"
	default:
		t.urls, t.source, t.hint = defaultURL, "the default", startHint+", or pass --server"
	}

	switch {
	case f.creds != "":
		t.creds, t.credsSource = f.creds, "--creds"
	case explicit != nil && explicit.Creds != "":
		t.creds, t.credsSource = explicit.Creds, explicit.source
	case f.env(envCreds) != "":
		t.creds, t.credsSource = f.env(envCreds), "$"+envCreds
	case implicit != nil && implicit.Creds != "":
		t.creds, t.credsSource = implicit.Creds, implicit.source
	}
	return t, nil
}

// configVarsSet returns the CONCLAVE_* variables set (not empty) that
// override configuration keys, as config.FromEnv reads them.
func configVarsSet(lookup func(string) (string, bool)) []string {
	var vars []string
	for _, k := range config.Keys() {
		if v, ok := lookup(k.Env()); ok && strings.TrimSpace(v) != "" && !k.PerUser() {
			vars = append(vars, k.Env())
		}
	}
	return vars
}

// options returns the nats.Connect options for the target's credentials and
// TLS settings: --config's (TLS files, plugin.nats.* login and the user's
// inbox prefix), the context's, and --creds.
func (t *target) options() ([]nats.Option, error) {
	var opts []nats.Option
	if t.cfg != nil {
		login, err := natsconn.Options(t.cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.cfgName, err)
		}
		opts = append(opts, login...)
	}
	if t.creds != "" {
		opts = append(opts, nats.UserCredentials(t.creds))
	}
	if t.ctx != nil {
		opts = append(opts, t.ctx.options()...)
	}
	opts = append(opts, t.login...)
	if t.user != "" && (t.ctx == nil || t.ctx.InboxPrefix == "") {
		// As with plugin.nats.user: a broker with users lets each receive
		// replies only on its own inbox prefix, _INBOX.<user>.
		opts = append(opts, nats.CustomInboxPrefix(acl.InboxPrefix(t.user)))
	}
	return opts, nil
}

// displayURLs is the server list for messages, with any password removed.
func (t *target) displayURLs() string {
	parts := strings.Split(t.urls, ",")
	for i, p := range parts {
		parts[i] = redactURL(strings.TrimSpace(p))
	}
	return strings.Join(parts, ", ")
}

// redactURL removes the password from a URL like nats://user:pass@host:4222.
func redactURL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return u
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		return u
	}
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}

// connectOptions say how a command uses its connection.
type connectOptions struct {
	// name is the connection name the broker shows.
	name string
	// longLived commands (watch, run) connect as the framework does; the
	// others end within a few requests.
	longLived bool
	// wait for a broker that does not answer yet (run), instead of failing
	// at once as the commands that inspect do.
	wait bool
	// log is where a waiting command says that it waits, and where the
	// connection's asynchronous errors go (see asyncErrorHandler); nil for
	// the commands without an event log.
	log *eventLog
	// verbose shows the connection's asynchronous errors that only explain
	// what the command reports itself, as debug lines in log.
	verbose bool
	// refused, when set, is told of every request the broker refuses the
	// connection for permissions.
	refused *refusals
}

// refusals tells the requests on one connection that the broker refused
// one of them for permissions, so that they need not wait out --timeout:
// NATS answers a refused request with silence, and only the connection's
// asynchronous error says why. Its methods may be called on nil, which is
// never told anything.
type refusals struct {
	mu      sync.Mutex
	changed chan struct{}
}

func newRefusals() *refusals { return &refusals{changed: make(chan struct{})} }

// next returns a channel closed at the next refusal.
func (r *refusals) next() <-chan struct{} {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// notify wakes those waiting on next.
func (r *refusals) notify() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	close(r.changed)
	r.changed = make(chan struct{})
}

// target resolves where and how to connect, once.
// who is the target's who, once resolved.
func (a *app) who() string {
	if a.resolved == nil {
		return "this user"
	}
	return a.resolved.who()
}

func (a *app) target() (*target, error) {
	if a.resolved == nil {
		t, err := a.conn.resolve()
		if err != nil {
			return nil, err
		}
		for _, w := range t.warnings {
			if a.json {
				newEventLog(a.stderr, true).event("log", map[string]any{"level": "warning"}, "warning: %s", w)
				continue
			}
			fmt.Fprintln(a.stderr, "conclave: warning:", w)
		}
		a.resolved = t
	}
	return a.resolved, nil
}

// config returns the target and the configuration a program would run on
// here: the target's (the configuration file's, else the CONCLAVE_*
// variables'), else, with --context, the defaults and the variables.
func (a *app) config() (*target, *config.Config, error) {
	t, err := a.target()
	if err != nil {
		return nil, nil, err
	}
	if t.cfg != nil {
		return t, t.cfg, nil
	}
	cfg, err := config.FromEnv(a.conn.lookup())
	return t, cfg, err
}

// lookup returns the function that reads the environment.
func (f *connFlags) lookup() func(string) (string, bool) {
	if f.lookupEnv == nil {
		return os.LookupEnv
	}
	return f.lookupEnv
}

// identity is the name a candidate campaigns under, as the framework
// chooses it: flag (--identity) if set, else the identity of --config's file,
// else the defaults: $CONCLAVE_IDENTITY overrides either, else the host
// name. It returns where the identity came from too.
func (a *app) identity(flag string) (string, string, error) {
	if flag != "" {
		return flag, "--identity", nil
	}
	t, cfg, err := a.config()
	if err != nil {
		return "", "", err
	}
	_, fromEnv := a.conn.lookup()(config.EnvPrefix + "IDENTITY")
	from := "the host name"
	if t.cfg != nil && t.cfg.Path != "" && cfg.Identity != config.Default().Identity {
		from = "identity in " + t.cfg.Path
	}
	if fromEnv {
		from = "$" + config.EnvPrefix + "IDENTITY"
	}
	return cfg.Identity, from, nil
}

// connect resolves the target and connects to it. Errors say what to do.
func (a *app) connect(ctx context.Context, co connectOptions) (*nats.Conn, *target, error) {
	timeout := a.conn.timeout
	if timeout <= 0 {
		return nil, nil, fmt.Errorf("--timeout %v: give a positive duration, such as 5s (the default) or 500ms: it bounds connecting and each request", timeout)
	}
	t, err := a.target()
	if err != nil {
		return nil, nil, err
	}
	opts, err := t.dialOptions(co, timeout)
	if err != nil {
		return nil, nil, err
	}
	if co.log == nil && a.json {
		co.log = newEventLog(a.stderr, true) // warnings as JSON lines too
	}
	opts = append(opts, nats.ErrorHandler(asyncErrorHandler(co, a.stderr)))
	type result struct {
		nc  *nats.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		nc, err := nats.Connect(t.urls, opts...)
		done <- result{nc, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		go func() {
			if r := <-done; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, nil, ctx.Err()
	}
	if r.err != nil {
		return nil, nil, t.connectError(r.err)
	}
	return r.nc, t, nil
}

// asyncErrorHandler returns the handler of a CLI connection's asynchronous
// errors, which nats.go would otherwise print raw to standard error
// ("nats: permissions violation: …" with a connection number). The
// connection still records each one (nc.LastError), which internal/denied
// reads to explain a refused request.
//
// A permissions violation is the command's to explain: the request it
// refused fails, and the command's error says which subject was refused
// (or the command goes without, as info does without the account's limits).
// It is therefore shown only as a debug line in co.log with co.verbose, and
// co.refused is told, so that the refused request ends at once.
// Any other error (a slow consumer, say) is one warning line: in co.log
// when the command has one, else on stderr.
func asyncErrorHandler(co connectOptions, stderr io.Writer) nats.ErrHandler {
	var mu sync.Mutex // one line at a time on stderr
	return func(_ *nats.Conn, sub *nats.Subscription, err error) {
		if err == nil {
			return
		}
		msg := err.Error()
		if sub != nil && sub.Subject != "" {
			msg = "on the subscription to " + sub.Subject + ": " + msg
		}
		if errors.Is(err, nats.ErrPermissionViolation) {
			co.refused.notify()
			if co.log != nil && co.verbose {
				co.log.event("log", map[string]any{"level": "debug"}, "debug: the broker refused a request of this connection's user: %s", msg)
			}
			return
		}
		if co.log != nil {
			co.log.event("log", map[string]any{"level": "warning"}, "warning: the NATS connection reported an error: %s", msg)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stderr, "conclave: warning: the NATS connection reported an error: %s\n", msg)
	}
}

// dialOptions returns the nats.Connect options of a connection to t: a
// long-lived one has the framework's settings (natsconn.ClientOptions:
// reconnect forever, ping every 10s, no writes buffered while
// disconnected); a short one reconnects as nats.go does by default but
// buffers no writes either, so that a stand-down is never sent late.
func (t *target) dialOptions(co connectOptions, timeout time.Duration) ([]nats.Option, error) {
	login, err := t.options()
	if err != nil {
		return nil, err
	}
	opts := []nats.Option{nats.Name(co.name), nats.Timeout(timeout)}
	if co.longLived {
		opts = append(opts, natsconn.ClientOptions()...)
	} else {
		opts = append(opts, nats.ReconnectBufSize(-1))
	}
	return append(opts, login...), nil
}

// connectError explains a failed connection.
func (t *target) connectError(err error) error {
	urls := t.displayURLs()
	authErr := errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked)
	if authErr && (t.user != "" || t.token || t.nkey != "") {
		// The login flags win over the configuration's login.
		return t.loginError(urls, err)
	}
	if t.cfg != nil {
		if explained := natsconn.Explain(err, t.cfg, "the broker at "+urls+" (from "+t.source+")"); explained != nil {
			return explained
		}
	}
	var (
		pathErr     *fs.PathError
		netErr      net.Error
		unknownCA   x509.UnknownAuthorityError
		badHostname x509.HostnameError
	)
	switch {
	case errors.As(err, &pathErr):
		// Before the network errors: a *fs.PathError is a net.Error too.
		return t.fileError(urls, pathErr, err)
	case errors.As(err, &unknownCA):
		return fmt.Errorf("the broker at %s (from %s) presented a certificate signed by a CA this client does not trust: pass --tlsca FILE (the CA that signed the broker's certificate, else $%s), or --config FILE with plugin.security.file.ca: %w", urls, t.source, envCA, err)
	case errors.As(err, &badHostname):
		return fmt.Errorf("the broker at %s (from %s) presented a certificate for another name: connect by a name its certificate holds (%w)", urls, t.source, err)
	case t.refusedWithoutCertificate(err):
		return fmt.Errorf("%w: the broker at %s (from %s) refused this client: it requires a client certificate its CA signed (plugin.choria.network.client_tls_force_required, on by default) and none was given: pass --tlscert FILE and --tlskey FILE with --tlsca FILE, or --config FILE with plugin.security.file.certificate, .key and .ca: %w",
			natsconn.ErrLogin, urls, t.source, err)
	case errors.Is(err, nats.ErrSecureConnWanted):
		return fmt.Errorf("the broker at %s (from %s) does not offer TLS, which a tls:// URL or the TLS flags ask for: connect with nats://, or turn TLS on at the broker: %w", urls, t.source, err)
	case silentListener(err):
		return fmt.Errorf("no broker at %s (from %s): something accepted the connection but did not answer as a NATS broker: check that the port is the broker's client port (4222 by default), not its monitoring (8222) or cluster port; %s: %w", urls, t.source, t.hint, err)
	case errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrTimeout), errors.As(err, &netErr):
		return fmt.Errorf("no broker at %s (from %s): %s: %w", urls, t.source, t.hint, err)
	case authErr:
		return t.loginError(urls, err)
	}
	return fmt.Errorf("connecting to %s (from %s): %w", urls, t.source, err)
}

// silentListener reports whether err is a connection accepted but left
// unanswered: the read of the server's greeting timed out, as on a port
// that speaks another protocol.
func silentListener(err error) bool {
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "read" && opErr.Timeout() &&
		!strings.Contains(err.Error(), "tls") // a TLS handshake that stalled after the broker's greeting
}

// fileError explains a connection that could not start because a file it
// needs (credentials, NKey seed, TLS certificate, key or CA) is missing or
// unreadable: it names the file, what it is and where it was given.
func (t *target) fileError(urls string, pathErr *fs.PathError, err error) error {
	what := "the file " + pathErr.Path
	for _, f := range []struct{ path, what string }{
		{t.creds, "the credentials file %s (from " + t.credsSource + ")"},
		{t.nkey, "the NKey seed file %s (--nkey or $" + envNKey + ")"},
		{t.tlsCert, "the client certificate %s (--tlscert or $" + envCert + ")"},
		{t.tlsKey, "the client certificate's key %s (--tlskey or $" + envKey + ")"},
		{t.tlsCA, "the CA certificate %s (--tlsca or $" + envCA + ")"},
	} {
		if f.path != "" && f.path == pathErr.Path {
			what = fmt.Sprintf(f.what, f.path)
			break
		}
	}
	if what == "the file "+pathErr.Path && t.ctx != nil {
		what += " (named by " + t.ctx.source + ")"
	} else if what == "the file "+pathErr.Path && t.cfg != nil {
		what += " (named by " + t.cfgName + ")"
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("cannot connect to %s: %s does not exist: check the path: %w", urls, what, err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("cannot connect to %s: %s cannot be read: check its permissions: %w", urls, what, err)
	}
	return fmt.Errorf("cannot connect to %s: %s cannot be read: %w", urls, what, err)
}

// loginError explains a broker refusing the login: it names the login
// that was refused, the flags or variables that gave it, and what to check.
// The login flags and variables win over a context's and --creds (the
// order of target.options), so they are named first.
func (t *target) loginError(urls string, err error) error {
	var what, check string
	switch {
	case t.user != "":
		what = fmt.Sprintf("the login of user %q (--user and --password, or $%s and $%s)", t.user, envUser, envPassword)
		check = "check the user name and password against the broker's users (a Conclave broker's plugin.conclave.user.NAME keys)"
	case t.token:
		what = "the token given with --token"
		check = "check the token against the broker's authorization token"
	case t.nkey != "":
		what = "the NKey in " + t.nkey + " (--nkey or $" + envNKey + ")"
		check = "check that the seed's public key is one of the broker's NKey users"
	case t.creds != "":
		what = "the credentials in " + t.creds + " (from " + t.credsSource + ")"
		check = "check them (or renew them, if they expired), or pass --creds FILE or --context NAME with credentials it accepts"
	case t.ctx != nil:
		what = "the credentials of " + t.ctx.source
		check = "check them, or pass --creds FILE or --context NAME with credentials it accepts"
	default:
		what = "a client without a login"
		check = "log in with --user and --password, --token, --nkey FILE, --creds FILE or --context NAME"
	}
	return fmt.Errorf("%w: the broker at %s (from %s) refused %s: %s: %w", natsconn.ErrLogin, urls, t.source, what, check, err)
}

// refusedWithoutCertificate reports whether err is a broker ending the TLS
// connection of a client that gave no certificate: the broker asks for one
// and, given none, closes the connection once the handshake is over, so
// the client sees its next write fail ("broken pipe") rather than a reason.
func (t *target) refusedWithoutCertificate(err error) bool {
	if t.clientCert || (t.ctx != nil && t.ctx.Cert != "") || (t.cfg != nil && t.cfg.TLSCertificate != "") {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "connection closed by remote after TLS handshake") ||
		strings.Contains(msg, "tls: certificate required") || strings.Contains(msg, "client didn't provide a certificate")
}

// loadClientConfig reads a Conclave or Choria configuration file with the
// CONCLAVE_* environment overrides, as the framework reads its own.
//
// Keys conclave does not know are skipped, so that a Choria client.conf,
// which sets many, can be used as it is; the keys conclave knows are
// checked as `conclave broker run` checks them, with their line numbers.
func loadClientConfig(path, name string, lookup func(string) (string, bool)) (*config.Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		if name == path {
			name = "configuration file"
		} else {
			name, _, _ = strings.Cut(name, " ")
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if lookup == nil {
		lookup = os.LookupEnv
	}
	cfg, err := config.ParseWithEnv(bytes.NewReader(knownKeysOnly(raw)), path, lookup)
	if err != nil {
		if name != path {
			name, _, _ = strings.Cut(name, " ")
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return nil, err
	}
	cfg.Path = path
	return cfg, nil
}

// configURLs returns the broker URLs of a configuration:
// plugin.choria.middleware_hosts, or, when it has none, the client address
// of the broker it configures (plugin.choria.broker_network).
func configURLs(cfg *config.Config, path string) ([]string, error) {
	if len(cfg.MiddlewareHosts) > 0 {
		return cfg.MiddlewareHosts, nil
	}
	if !cfg.BrokerNetwork {
		return nil, fmt.Errorf("%s sets no plugin.choria.middleware_hosts: add it (e.g. plugin.choria.middleware_hosts = nats://broker.example.net:4222), or pass --server", path)
	}
	if cfg.ClientPort == config.RandomPort {
		return nil, fmt.Errorf("%s configures a broker on a random client port (plugin.choria.network.client_port = -1), so its address cannot be known: pass --server with the client_url its log shows", path)
	}
	host := cfg.ListenAddress
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return []string{"nats://" + net.JoinHostPort(host, strconv.Itoa(cfg.ClientPort))}, nil
}

// knownKeysOnly blanks every line of a configuration file whose key conclave
// does not read, keeping the line numbering, so that a Choria file's own
// keys pass. A key within two edits of one conclave reads is kept: it is
// more likely a typo than a Choria key, and parsing then reports it with
// its line and "did you mean".
func knownKeysOnly(raw []byte) []byte {
	known := map[string]bool{}
	var names []string
	for _, k := range config.Keys() {
		known[k.Name] = true
		if !k.PerUser() {
			names = append(names, k.Name)
		}
	}
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(strings.TrimPrefix(line, "\ufeff"))
		if key, _, ok := strings.Cut(trimmed, "="); ok && !strings.HasPrefix(trimmed, "#") {
			key = strings.TrimSpace(key)
			if !known[key] && !suggest.Within(key, names, 2) {
				line = ""
			}
		}
		out.WriteString(line)
		out.WriteByte('\n')
	}
	return out.Bytes()
}
