package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// validCase is one valid value for a key and what it must parse to.
type validCase struct {
	key, value string
	get        func(*Config) any
	want       any
}

func identity(c *Config) any      { return c.Identity }
func logLevel(c *Config) any      { return c.LogLevel }
func logFile(c *Config) any       { return c.LogFile }
func middleware(c *Config) any    { return c.MiddlewareHosts }
func brokerNetwork(c *Config) any { return c.BrokerNetwork }
func listenAddress(c *Config) any { return c.ListenAddress }
func clientPort(c *Config) any    { return c.ClientPort }
func peerPort(c *Config) any      { return c.PeerPort }
func peers(c *Config) any         { return c.Peers }
func streamStore(c *Config) any   { return c.StreamStore }
func syncAlways(c *Config) any    { return c.SyncAlways }
func ttl(c *Config) any           { return c.LeaderElectionTTL }
func replicas(c *Config) any      { return c.LeaderElectionReplicas }
func statsAddress(c *Config) any  { return c.StatsAddress }
func statsPort(c *Config) any     { return c.StatsPort }

// testHash is a bcrypt hash made at the lowest cost, for speed.
var testHash = func() string {
	h, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		panic(err)
	}
	return string(h)
}()

// user returns a getter of a field of the broker user NAME.
func user(field func(*User) any) func(*Config) any {
	return func(c *Config) any {
		if c.Users["NAME"] == nil {
			return nil
		}
		return field(c.Users["NAME"])
	}
}

// validCases lists valid values for every key. The bool keys are set to the
// opposite of their default where possible so that a setter that does nothing
// fails.
func validCases() []validCase {
	var cases []validCase
	add := func(key string, get func(*Config) any, pairs ...any) {
		for i := 0; i < len(pairs); i += 2 {
			cases = append(cases, validCase{key: key, value: pairs[i].(string), get: get, want: pairs[i+1]})
		}
	}
	add("identity", identity,
		"n1", "n1",
		"broker1.example.net", "broker1.example.net",
		"node#1", "node#1", // # inside a value is not a comment
		"ünï-côdé_1", "ünï-côdé_1")
	add("loglevel", logLevel,
		"debug", "debug", "info", "info", "warn", "warn", "error", "error",
		"warning", "warn", "WARNING", "warn", "Debug", "debug", "ERROR", "error")
	add("logfile", logFile,
		"/var/log/conclave.log", "/var/log/conclave.log",
		"", "")
	add("plugin.choria.middleware_hosts", middleware,
		"broker1:4222", []string{"nats://broker1:4222"},
		"nats://broker1:4222", []string{"nats://broker1:4222"},
		"NATS://broker1:4222/", []string{"nats://broker1:4222"},
		"tls://broker1:4443", []string{"tls://broker1:4443"},
		"a:1, nats://b:2 ,tls://c:3", []string{"nats://a:1", "nats://b:2", "tls://c:3"},
		"10.0.0.1:4222,[::1]:4222", []string{"nats://10.0.0.1:4222", "nats://[::1]:4222"},
		"a:04222", []string{"nats://a:4222"},
		"", []string(nil))
	for _, spelling := range []string{"true", "TRUE", "yes", "Yes", "on", "ON", "1"} {
		add("plugin.choria.broker_network", brokerNetwork, spelling, true)
	}
	add("plugin.choria.network.listen_address", listenAddress,
		"0.0.0.0", "0.0.0.0",
		"::", "::",
		"[::1]", "::1",
		"broker1.example.net", "broker1.example.net",
		"localhost", "localhost")
	add("plugin.choria.network.client_port", clientPort,
		"1", 1, "4333", 4333, "65535", 65535, "-1", RandomPort)
	add("plugin.choria.network.peer_port", peerPort,
		"0", 0, "5222", 5222, "65535", 65535, "-1", RandomPort)
	add("plugin.choria.network.peers", peers,
		"b2:5222", []string{"nats://b2:5222"},
		"nats://b2:5222, b3:5222", []string{"nats://b2:5222", "nats://b3:5222"})
	add("plugin.choria.network.stream.store", streamStore,
		"/var/lib/conclave", "/var/lib/conclave",
		"relative dir", "relative dir")
	for _, spelling := range []string{"false", "False", "no", "NO", "off", "Off", "0"} {
		add("plugin.choria.network.stream.sync_always", syncAlways, spelling, false)
	}
	add("plugin.choria.network.stream.leader_election_ttl", ttl,
		"60", time.Minute,
		"1", time.Second,
		"3600", time.Hour,
		"1m", time.Minute,
		"30s", 30*time.Second,
		"1m30s", 90*time.Second,
		"1.5s", 1500*time.Millisecond,
		"2h", 2*time.Hour)
	add("plugin.choria.network.stream.leader_election_replicas", replicas,
		"-1", ClusterSizeReplicas, "1", 1, "3", 3, "5", 5)
	add("plugin.conclave.election.priority", func(c *Config) any { return c.ElectionPriority },
		"0", 0, "10", 10, "-5", -5, "1073741824", 1<<30, "-1073741824", -(1 << 30))
	add("plugin.conclave.election.min_term", func(c *Config) any { return c.ElectionMinTerm },
		"0", time.Duration(0), "30", 30*time.Second, "1m", time.Minute, "500ms", 500*time.Millisecond)
	add("plugin.choria.stats_address", statsAddress,
		"0.0.0.0", "0.0.0.0", "monitor.local", "monitor.local")
	add("plugin.choria.stats_port", statsPort,
		"0", 0, "8222", 8222, "-1", RandomPort)
	add("plugin.security.provider", func(c *Config) any { return c.SecurityProvider },
		"file", "file", "FILE", "file")
	add("plugin.security.file.certificate", func(c *Config) any { return c.TLSCertificate }, "/etc/conclave/n1.pem", "/etc/conclave/n1.pem")
	add("plugin.security.file.key", func(c *Config) any { return c.TLSKey }, "/etc/conclave/n1-key.pem", "/etc/conclave/n1-key.pem")
	add("plugin.security.file.ca", func(c *Config) any { return c.TLSCA }, "/etc/conclave/ca.pem", "/etc/conclave/ca.pem")
	add("plugin.security.cipher_suites", func(c *Config) any { return c.CipherSuites },
		"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
		[]string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"})
	add("plugin.security.ecc_curves", func(c *Config) any { return c.ECCCurves },
		"X25519,CurveP256", []string{"X25519", "CurveP256"})
	add("plugin.choria.network.client_tls_force_required", func(c *Config) any { return c.ClientTLSForceRequired },
		"false", false, "no", false)
	add("plugin.choria.network.tls_timeout", func(c *Config) any { return c.TLSTimeout },
		"5", 5*time.Second, "500ms", 500*time.Millisecond)
	add("plugin.choria.network.peer_user", func(c *Config) any { return c.PeerUser }, "route", "route")
	add("plugin.choria.network.peer_password", func(c *Config) any { return c.PeerPassword }, "p w#1", "p w#1")
	add("plugin.nats.user", func(c *Config) any { return c.NATSUser }, "app-a", "app-a")
	add("plugin.nats.pass", func(c *Config) any { return c.NATSPass }, "s3cret", "s3cret")
	add("plugin.nats.credentials", func(c *Config) any { return c.NATSCredentials }, "/etc/conclave/app.creds", "/etc/conclave/app.creds")
	add("plugin.conclave.insecure", func(c *Config) any { return c.Insecure }, "true", true)
	add(UserKeyPrefix+"NAME.password", user(func(u *User) any { return u.PasswordHash }), testHash, testHash)
	add(UserKeyPrefix+"NAME.certificate", user(func(u *User) any { return u.Certificate }),
		"app-a.example.net", "app-a.example.net", "CN=app-a,O=Example", "CN=app-a,O=Example")
	add(UserKeyPrefix+"NAME.campaign", user(func(u *User) any { return u.Campaign }),
		"app-a.>", []string{"app-a.>"},
		"billing, app-b.*.cron, app-b.*.cron", []string{"billing", "app-b.*.cron"},
		">", []string{">"})
	add(UserKeyPrefix+"NAME.observe", user(func(u *User) any { return u.Observe }),
		">", []string{">"}, "a/b=c_d-e", []string{"a/b=c_d-e"})
	add(UserKeyPrefix+"NAME.admin", user(func(u *User) any { return u.Admin }), "true", true)
	return cases
}

// tlsLines turn TLS on; needs comments out the key under test.
const tlsLines = "\nplugin.security.file.certificate = /c.pem\nplugin.security.file.key = /k.pem\nplugin.security.file.ca = /ca.pem\n"

// needs returns the lines another key needs for a value of key to validate.
func needs(key string) string {
	switch key {
	case "plugin.choria.broker_network":
		return "plugin.choria.network.stream.store = /tmp/store\n"
	case "plugin.choria.network.peers":
		return "plugin.choria.network.peer_port = 5222\n"
	case "plugin.choria.network.peer_port", "plugin.choria.stats_port":
		return "plugin.choria.network.client_port = 4333\n" // keep clear of 4222 and 5222
	case "plugin.security.file.certificate", "plugin.security.file.key", "plugin.security.file.ca",
		"plugin.security.provider", "plugin.security.cipher_suites", "plugin.security.ecc_curves":
		return strings.ReplaceAll(tlsLines, "\n"+key+" = ", "\n# ")
	case "plugin.nats.pass":
		return "plugin.nats.user = app-a\n"
	case "plugin.choria.network.peer_user":
		return "plugin.choria.network.peer_password = x\n"
	case "plugin.choria.network.peer_password":
		return "plugin.choria.network.peer_user = route\n"
	case UserKeyPrefix + "NAME.password":
		return UserKeyPrefix + "NAME.admin = true\n"
	case UserKeyPrefix + "NAME.certificate":
		return tlsLines + UserKeyPrefix + "NAME.admin = true\n"
	case UserKeyPrefix + "NAME.campaign", UserKeyPrefix + "NAME.observe", UserKeyPrefix + "NAME.admin":
		return UserKeyPrefix + "NAME.password = " + testHash + "\n"
	}
	return ""
}

func TestParseValidValues(t *testing.T) {
	for _, tc := range validCases() {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			c := mustParse(t, needs(tc.key)+tc.key+" = "+tc.value+"\n", nil)
			if got := tc.get(c); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s = %q: got %#v, want %#v", tc.key, tc.value, got, tc.want)
			}
		})
	}
}

func TestValidCasesCoverEveryKey(t *testing.T) {
	covered := map[string]bool{}
	for _, tc := range validCases() {
		covered[tc.key] = true
	}
	for _, k := range Keys() {
		if !covered[k.Name] {
			t.Errorf("key %s has no case in validCases", k.Name)
		}
	}
}

func TestParseWhitespaceCommentsAndLineEndings(t *testing.T) {
	text := "\ufeff# a comment\n" +
		"   # an indented comment\n" +
		"\n" +
		"   \t\n" +
		"identity=n1\r\n" +
		"\tloglevel   =   debug   \n" +
		"logfile = /tmp/a # b\n" +
		"plugin.choria.network.stream.store = /data=x"
	c := mustParse(t, text, nil)
	for _, check := range []struct{ got, want string }{
		{c.Identity, "n1"},
		{c.LogLevel, "debug"},
		{c.LogFile, "/tmp/a # b"},
		{c.StreamStore, "/data=x"},
	} {
		if check.got != check.want {
			t.Errorf("got %q, want %q", check.got, check.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	c := mustParse(t, "", nil)
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("empty file: got %+v, want Default() %+v", c, Default())
	}
	want, err := os.Hostname()
	if err != nil || want == "" {
		want = "localhost"
	}
	if c.Identity != want {
		t.Errorf("default identity = %q, want the host name %q", c.Identity, want)
	}
	if err := Default().Validate(); err != nil {
		t.Errorf("Default().Validate() = %v", err)
	}
}

// TestDefaultsMatchKeyTable checks that Default agrees with the defaults the
// documentation shows: a file setting every key to its documented default
// must parse to Default().
func TestDefaultsMatchKeyTable(t *testing.T) {
	var file strings.Builder
	for _, k := range Keys() {
		if k.DefaultIsComputed() || k.PerUser() {
			continue
		}
		file.WriteString(k.Name + " = " + k.Default + "\n")
	}
	c := mustParse(t, file.String(), nil)
	if want := Default(); !reflect.DeepEqual(c, want) {
		t.Errorf("documented defaults parse to %+v, want Default() %+v", c, want)
	}
	// And the documented defaults are the ones the brief specified.
	spec := map[string]string{
		"loglevel":                                              "info",
		"logfile":                                               "",
		"plugin.choria.middleware_hosts":                        "",
		"plugin.choria.broker_network":                          "false",
		"plugin.choria.network.listen_address":                  "127.0.0.1",
		"plugin.choria.network.client_port":                     "4222",
		"plugin.choria.network.peer_port":                       "0",
		"plugin.choria.network.peers":                           "",
		"plugin.choria.network.stream.store":                    "",
		"plugin.choria.network.stream.sync_always":              "true",
		"plugin.choria.network.stream.leader_election_ttl":      "1m",
		"plugin.choria.network.stream.leader_election_replicas": "-1",
		"plugin.choria.stats_address":                           "127.0.0.1",
		"plugin.choria.stats_port":                              "0",
		"plugin.choria.network.client_tls_force_required":       "true",
		"plugin.choria.network.tls_timeout":                     "2s",
		"plugin.conclave.insecure":                              "false",
	}
	for _, k := range Keys() {
		if want, ok := spec[k.Name]; ok && k.Default != want {
			t.Errorf("%s: documented default %q, want %q", k.Name, k.Default, want)
		}
	}
}

// badCase is a file with one bad line.
type badCase struct {
	name string
	text string // the bad line is the last one
	key  string
	kind error
	msg  string // a substring of the message
}

func badCases() []badCase {
	const pre = "# header\n\n" // the bad line is line 3
	bad := func(key, value, msg string) badCase {
		return badCase{name: key + "=" + value, text: pre + key + " = " + value, key: key, kind: ErrInvalidValue, msg: msg}
	}
	return []badCase{
		{name: "no equals", text: pre + "listen 0.0.0.0", kind: ErrSyntax, msg: `"listen 0.0.0.0" is not a "key = value" line`},
		{name: "empty key", text: pre + "  = 4222", kind: ErrSyntax, msg: `has no key before "="`},
		{name: "unknown key", text: pre + "plugin.choria.network.client_prot = 1", key: "plugin.choria.network.client_prot", kind: ErrUnknownKey, msg: "did you mean plugin.choria.network.client_port?"},
		{name: "duplicate", text: "identity = a\nloglevel = info\nidentity = b", key: "identity", kind: ErrDuplicateKey, msg: "first set on line 1"},

		bad("identity", "my node", `"my node" contains white space`),
		bad("identity", "n*", `contains the wildcard '*'`),
		bad("identity", "n>1", `contains the wildcard '>'`),
		bad("identity", "", "is empty"),
		bad("loglevel", "verbose", `"verbose" is not a log level: use debug, info, warn or error`),
		bad("loglevel", "", `"" is not a log level`),
		bad("plugin.choria.middleware_hosts", "broker1", `"broker1" has no port: use host:port, nats://host:port or tls://host:port, e.g. broker1:4222`),
		bad("plugin.choria.middleware_hosts", "http://b:4222", `"http://b:4222" has the scheme "http"`),
		bad("plugin.choria.middleware_hosts", "b:0", `"b:0" has the port "0": use 1 to 65535`),
		bad("plugin.choria.middleware_hosts", "b:99999", `has the port "99999"`),
		bad("plugin.choria.middleware_hosts", "b:x", `has the port "x"`),
		bad("plugin.choria.middleware_hosts", "a:1,,b:2", "an entry is empty"),
		bad("plugin.choria.middleware_hosts", "a:1,", "an entry is empty"),
		bad("plugin.choria.middleware_hosts", "nats://u:secret@b:1", "user name or password"),
		bad("plugin.choria.middleware_hosts", "nats://b:1/x", "has a path or query"),
		bad("plugin.choria.middleware_hosts", "::1:4222", "IPv6 addresses go in brackets"),
		bad("plugin.choria.middleware_hosts", "b d:1", `has an invalid host "b d"`),
		bad("plugin.choria.middleware_hosts", "a:1, nats://a:1", `"nats://a:1" is listed twice`),
		bad("plugin.choria.middleware_hosts", "x, y:z", `e.g. x:4222; "y:z" has the port "z"`),
		bad("plugin.choria.broker_network", "maybe", `"maybe" is not a boolean: use true or false`),
		bad("plugin.choria.broker_network", "2", `"2" is not a boolean`),
		bad("plugin.choria.network.listen_address", "0.0.0.0:4222", `includes a port: give the address alone and the port in plugin.choria.network.client_port`),
		bad("plugin.choria.network.listen_address", "not a host", "is not an IP address or host name"),
		bad("plugin.choria.network.listen_address", "", "is empty"),
		bad("plugin.choria.network.client_port", "abc", `"abc" is not a port number: use 1 to 65535`),
		bad("plugin.choria.network.client_port", "0", "0 is out of range: use 1 to 65535"),
		bad("plugin.choria.network.client_port", "65536", "65536 is out of range"),
		bad("plugin.choria.network.client_port", "-2", "-2 is out of range"),
		bad("plugin.choria.network.client_port", "", `"" is not a port number`),
		bad("plugin.choria.network.peer_port", "-5", "-5 is out of range: use 1 to 65535, 0 for no cluster"),
		bad("plugin.choria.network.peer_port", "70000", "70000 is out of range"),
		bad("plugin.choria.network.peers", "tls://b:5222", `has the scheme "tls": use host:port or nats://host:port`),
		bad("plugin.choria.network.peers", "b2", `"b2" has no port: use host:port or nats://host:port, e.g. b2:5222`),
		bad("plugin.choria.network.stream.sync_always", "yes please", `"yes please" is not a boolean`),
		bad("plugin.choria.network.stream.leader_election_ttl", "500ms", `"500ms" is too short: use at least 1s`),
		bad("plugin.choria.network.stream.leader_election_ttl", "0", `"0" is too short: use at least 1s`),
		bad("plugin.choria.network.stream.leader_election_ttl", "-1m", "is too short"),
		bad("plugin.choria.network.stream.leader_election_ttl", "abc", `"abc" is not a duration: use a Go duration such as 30s`),
		bad("plugin.choria.network.stream.leader_election_ttl", "1.5", "is not a duration"),
		bad("plugin.choria.network.stream.leader_election_ttl", "99999999999999999", "too long"),
		bad("plugin.choria.network.stream.leader_election_replicas", "0", "0 is out of range: use 1 to 5, or -1 for the cluster size"),
		bad("plugin.choria.network.stream.leader_election_replicas", "6", "6 is out of range"),
		bad("plugin.choria.network.stream.leader_election_replicas", "-2", "-2 is out of range"),
		bad("plugin.choria.network.stream.leader_election_replicas", "three", `"three" is not a number`),
		bad("plugin.conclave.election.priority", "1073741825", "1073741825 is out of range: use a whole number from -1073741824 to 1073741824"),
		bad("plugin.conclave.election.priority", "-1073741825", "-1073741825 is out of range"),
		bad("plugin.conclave.election.priority", "high", `"high" is not a number`),
		bad("plugin.conclave.election.min_term", "-1s", "-1s is negative"),
		bad("plugin.conclave.election.min_term", "soon", `"soon" is not a duration`),
		bad("plugin.choria.stats_address", "1.2.3.4:80", "the port in plugin.choria.stats_port"),
		bad("plugin.choria.stats_port", "65536", "65536 is out of range: use 1 to 65535, 0 to turn monitoring off"),
		bad("plugin.choria.stats_port", "x", `"x" is not a port number`),
		bad("plugin.security.provider", "puppet", `"puppet" is not supported: Conclave supports only "file"`),
		bad("plugin.security.cipher_suites", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA265", "did you mean TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256?"),
		bad("plugin.security.ecc_curves", "P-256", `unknown curve "P-256"`),
		bad("plugin.choria.network.client_tls_force_required", "sure", `"sure" is not a boolean`),
		bad("plugin.choria.network.tls_timeout", "0", "must be positive"),
		bad("plugin.conclave.insecure", "yes please", "is not a boolean"),
		bad(UserKeyPrefix+"NAME.password", "hunter2", "is not a bcrypt hash (it does not start with $2a$, $2b$ or $2y$): passwords are stored only as hashes; make one with `conclave hash-password`"),
		bad(UserKeyPrefix+"NAME.password", "$2a$10$short", "is not a valid bcrypt hash"),
		bad(UserKeyPrefix+"NAME.certificate", "", "is empty"),
		bad(UserKeyPrefix+"NAME.campaign", "app-a.>.x", `"app-a.>.x" has > before its end`),
		bad(UserKeyPrefix+"NAME.campaign", "app a", `has the token "app a"`),
		bad(UserKeyPrefix+"NAME.campaign", "app-a*", `"app-a*" has the token "app-a*": * and > must be whole tokens between dots (* any one token, a final > one or more), as in app-a.*; a pattern cannot match part of a token`),
		bad(UserKeyPrefix+"NAME.observe", "app-a.b>", `as in app-a.b.>;`),
		bad(UserKeyPrefix+"NAME.observe", "a,,b", "an election pattern is empty"),
		bad(UserKeyPrefix+"NAME.admin", "maybe", `"maybe" is not a boolean`),
		bad(UserKeyPrefix+"a.b.admin", "true", `user name "a.b" may hold only letters`),
		{name: "user field typo", text: pre + UserKeyPrefix + "ops.admn = true", key: UserKeyPrefix + "ops.admn", kind: ErrUnknownKey, msg: "did you mean " + UserKeyPrefix + "ops.admin?"},
		{name: "user without field", text: pre + UserKeyPrefix + "ops = true", key: UserKeyPrefix + "ops", kind: ErrUnknownKey, msg: "user keys are " + UserKeyPrefix + "NAME.FIELD"},
	}
}

func TestParseReportsBadLines(t *testing.T) {
	for _, tc := range badCases() {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseText(t, tc.text, nil)
			if c != nil {
				t.Errorf("got a Config %+v along with the error", c)
			}
			errs := lineErrors(t, err)
			if len(errs) != 1 {
				t.Fatalf("got %d errors, want 1: %v", len(errs), err)
			}
			le := errs[0]
			wantLine := strings.Count(tc.text, "\n") + 1
			if le.File != "test.conf" || le.Line != wantLine || le.Key != tc.key {
				t.Errorf("got file %q line %d key %q, want test.conf line %d key %q", le.File, le.Line, le.Key, wantLine, tc.key)
			}
			if !errors.Is(err, tc.kind) {
				t.Errorf("error %q does not match %v", err, tc.kind)
			}
			prefix := "test.conf:" + strconv.Itoa(wantLine) + ": "
			if tc.key != "" {
				prefix += tc.key + ": "
			}
			if msg := err.Error(); !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, tc.msg) {
				t.Errorf("message %q: want prefix %q and %q in it", msg, prefix, tc.msg)
			}
		})
	}
}

func TestBadCasesCoverEveryTypedKey(t *testing.T) {
	covered := map[string]bool{}
	for _, tc := range badCases() {
		covered[tc.key] = true
	}
	for _, k := range Keys() {
		if k.Type != "path" && k.Type != "string" && !covered[k.Name] {
			t.Errorf("key %s (%s) has no case in badCases", k.Name, k.Type)
		}
	}
}

func TestLineErrorFormat(t *testing.T) {
	text := strings.Repeat("\n", 6) + "plugin.choria.network.client_port = abc\n"
	_, err := ParseWithEnv(strings.NewReader(text), "broker.conf", nil)
	want := `broker.conf:7: plugin.choria.network.client_port: "abc" is not a port number: use 1 to 65535, or -1 for a random free port`
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

func TestParseReportsEveryError(t *testing.T) {
	text := strings.Join([]string{
		"identity = n1",                         // 1 fine
		"plugin.choria.network.client_port = x", // 2 bad value
		"garbage",                               // 3 syntax
		"loglevl = debug",                       // 4 unknown, suggestion
		"identity = n2",                         // 5 duplicate
		"# plugin.choria.stats_port = x",        // 6 comment
		"plugin.choria.stats_port = x",          // 7 bad value
		"plugin.choria.broker_network = true",   // 8 fine, but no store: Validate must not run
	}, "\n")
	_, err := parseText(t, text, nil)
	type want struct {
		line int
		key  string
		kind error
	}
	wants := []want{
		{2, "plugin.choria.network.client_port", ErrInvalidValue},
		{3, "", ErrSyntax},
		{4, "loglevl", ErrUnknownKey},
		{5, "identity", ErrDuplicateKey},
		{7, "plugin.choria.stats_port", ErrInvalidValue},
	}
	errs := lineErrors(t, err)
	if len(errs) != len(wants) {
		t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(wants), err)
	}
	for i, w := range wants {
		if errs[i].Line != w.line || errs[i].Key != w.key || !errors.Is(errs[i], w.kind) {
			t.Errorf("error %d = %q, want line %d key %q kind %v", i, errs[i], w.line, w.key, w.kind)
		}
	}
	if errors.Is(err, ErrInvalid) {
		t.Errorf("Validate ran on a file with bad lines: %v", err)
	}
}

func TestUnknownKeySuggestions(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"identiy", "identity"},
		{"Identity", "identity"},
		{"log_level", "loglevel"},
		{"plugin.choria.network.client_prot", "plugin.choria.network.client_port"},
		{"plugin.choria.network.leader_election_ttl", "plugin.choria.network.stream.leader_election_ttl"},
		{"plugin.choria.network.stream.sync_alway", "plugin.choria.network.stream.sync_always"},
		{"plugin.choria.stats_prot", "plugin.choria.stats_port"},
		{"plugin.choria.srv_domain", ""},
		{"collectives", ""},
		{"x", ""},
	} {
		t.Run(tc.key, func(t *testing.T) {
			_, err := parseText(t, tc.key+" = 1", nil)
			if !errors.Is(err, ErrUnknownKey) {
				t.Fatalf("got %v, want ErrUnknownKey", err)
			}
			msg := err.Error()
			if tc.want == "" {
				if strings.Contains(msg, "did you mean") {
					t.Errorf("%q: no suggestion wanted", msg)
				}
				return
			}
			if want := "did you mean " + tc.want + "?"; !strings.Contains(msg, want) {
				t.Errorf("%q: want %q", msg, want)
			}
		})
	}
}

func TestParseLongLine(t *testing.T) {
	text := "identity = n1\nlogfile = " + strings.Repeat("x", maxLine) + "\n"
	_, err := parseText(t, text, nil)
	if err == nil || !strings.Contains(err.Error(), "reading test.conf") {
		t.Errorf("got %v, want a read error", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "broker.conf")
	text := "identity = n1\nplugin.choria.network.client_port = 4333\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadWithEnv(path, envMap(map[string]string{"CONCLAVE_LOGLEVEL": "debug"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Path != path || c.Identity != "n1" || c.ClientPort != 4333 || c.LogLevel != "debug" {
		t.Errorf("got %+v", c)
	}

	_, err = Load(filepath.Join(dir, "missing.conf"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: got %v, want fs.ErrNotExist", err)
	}

	bad := filepath.Join(dir, "bad.conf")
	if err := os.WriteFile(bad, []byte("\nidentity = a b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	if errs := lineErrors(t, err); len(errs) != 1 || errs[0].File != bad || errs[0].Line != 2 {
		t.Errorf("bad file: got %v, want one error at %s:2", err, bad)
	}
}

func TestParseReadsOSEnvironment(t *testing.T) {
	t.Setenv("CONCLAVE_IDENTITY", "from-env")
	c, err := Parse(strings.NewReader("identity = from-file\n"), "test.conf")
	if err != nil {
		t.Fatal(err)
	}
	if c.Identity != "from-env" {
		t.Errorf("identity = %q, want the environment's from-env", c.Identity)
	}
	if c.Path != "" {
		t.Errorf("Parse set Path to %q", c.Path)
	}
}

func TestKeysIsACopy(t *testing.T) {
	a := Keys()
	a[0].Name = "changed"
	if b := Keys(); b[0].Name == "changed" {
		t.Error("Keys returns shared state")
	}
	names := keyNames(Keys())
	if unique := slices.Compact(slices.Sorted(slices.Values(names))); len(unique) != len(names) {
		t.Errorf("duplicate key names in %v", names)
	}
}
