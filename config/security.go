package config

import (
	"crypto/tls"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/conclave-io/conclave/internal/suggest"
)

// SecurityProviderFile is the one plugin.security.provider Conclave supports:
// certificate, key and CA read from the files plugin.security.file.* name.
const SecurityProviderFile = "file"

// DefaultTLSTimeout is plugin.choria.network.tls_timeout's default: how long
// a TLS handshake may take.
const DefaultTLSTimeout = 2 * time.Second

// UserKeyPrefix starts every key of a broker user: UserKeyPrefix + NAME + "." + field.
const UserKeyPrefix = "plugin.conclave.user."

// User is a broker user (the keys plugin.conclave.user.NAME.*): how it
// authenticates and which elections it may touch.
type User struct {
	// Name is the NAME in its keys: letters, digits, '-' and '_'.
	Name string
	// PasswordHash is a bcrypt hash of its password (…password); never a
	// plain-text password.
	PasswordHash string
	// Certificate is the identity its client certificate must carry
	// (…certificate): a DNS or e-mail SAN, or the subject DN as Go prints
	// it (e.g. CN=app-a,O=Example).
	Certificate string
	// Campaign lists the elections it may campaign in, stand down and
	// observe (…campaign): names or patterns where * is one token and a
	// final > is one or more, as in NATS subjects.
	Campaign []string
	// Observe lists the elections it may only watch (…observe), as Campaign.
	Observe []string
	// Admin lets it see every election and stand any leader down (…admin).
	Admin bool
}

// userNameRE is what a user NAME may be: one NATS subject token, also usable
// in its inbox prefix.
var userNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// userFields are the keys every user may set, after its NAME.
func userFields() []Key {
	return []Key{
		{
			Name: UserKeyPrefix + "NAME.password", Type: "bcrypt hash", Default: "", secret: true,
			Description: "Broker user NAME logs in with a password whose bcrypt hash this is (make one with `conclave hash-password`); plain-text passwords are refused.",
			setUser: func(u *User, v string) error {
				if err := checkBcrypt(v); err != nil {
					return err
				}
				u.PasswordHash = v
				return nil
			},
		},
		{
			Name: UserKeyPrefix + "NAME.certificate", Type: "string", Default: "",
			Description: "Broker user NAME logs in with a client certificate carrying this identity: a DNS or e-mail SAN, or the subject DN such as `CN=app-a,O=Example`.",
			setUser: func(u *User, v string) error {
				if v == "" {
					return invalidf("is empty: give a SAN or a subject DN such as CN=%s", u.Name)
				}
				u.Certificate = v
				return nil
			},
		},
		{
			Name: UserKeyPrefix + "NAME.campaign", Type: "list of elections", Default: "",
			Description: "Elections user NAME may campaign in, stand down and watch, comma separated: names, or patterns with `*` for one dot-separated token and a final `>` for the rest, e.g. `app-a.>`.",
			setUser: func(u *User, v string) (err error) {
				u.Campaign, err = parseElectionPatterns(v)
				return err
			},
		},
		{
			Name: UserKeyPrefix + "NAME.observe", Type: "list of elections", Default: "",
			Description: "Elections user NAME may only watch, as for campaign; `>` is every election.",
			setUser: func(u *User, v string) (err error) {
				u.Observe, err = parseElectionPatterns(v)
				return err
			},
		},
		{
			Name: UserKeyPrefix + "NAME.admin", Type: "boolean", Default: "false",
			Description: "User NAME sees every election and may stand any leader down; it still cannot purge or delete the bucket.",
			setUser: func(u *User, v string) (err error) {
				u.Admin, err = parseBool(v)
				return err
			},
		},
	}
}

// parseUserKey splits a key UserKeyPrefix + NAME + "." + field into the
// field's Key and NAME. ok is false when name is not a user key at all;
// err says what is wrong with one that is.
func parseUserKey(name string, fields map[string]Key) (k Key, user string, ok bool, err error) {
	rest, found := strings.CutPrefix(name, UserKeyPrefix)
	if !found {
		return Key{}, "", false, nil
	}
	dot := strings.LastIndex(rest, ".")
	if dot <= 0 {
		return Key{}, "", true, newProblem(ErrUnknownKey, "unknown key: user keys are %sNAME.FIELD, with FIELD one of %s", UserKeyPrefix, strings.Join(userFieldNames(fields), ", "))
	}
	user, field := rest[:dot], rest[dot+1:]
	if !userNameRE.MatchString(user) {
		return Key{}, user, true, invalidf("user name %q may hold only letters, digits, '-' and '_'", user)
	}
	k, known := fields[field]
	if !known {
		if s := suggest.Nearest(field, userFieldNames(fields)); s != "" {
			return Key{}, user, true, newProblem(ErrUnknownKey, "unknown key: did you mean %s%s.%s?", UserKeyPrefix, user, s)
		}
		return Key{}, user, true, newProblem(ErrUnknownKey, "unknown key: a user's fields are %s", strings.Join(userFieldNames(fields), ", "))
	}
	return k, user, true, nil
}

// userFieldIndex indexes userFields by their last token.
func userFieldIndex() map[string]Key {
	index := map[string]Key{}
	for _, k := range userFields() {
		index[k.Name[strings.LastIndex(k.Name, ".")+1:]] = k
	}
	return index
}

func userFieldNames(fields map[string]Key) []string { return slices.Sorted(maps.Keys(fields)) }

// checkBcrypt accepts a bcrypt hash, never echoing the value: it may be a
// password typed where its hash belongs.
func checkBcrypt(v string) error {
	if !strings.HasPrefix(v, "$2") {
		return invalidf("is not a bcrypt hash (it does not start with $2a$, $2b$ or $2y$): passwords are stored only as hashes; make one with `conclave hash-password` and put its output here")
	}
	if _, err := bcrypt.Cost([]byte(v)); err != nil {
		return invalidf("is not a valid bcrypt hash (%v): make one with `conclave hash-password`", err)
	}
	return nil
}

// electionTokenRE is one token of an election name: the characters NATS KV
// allows in keys, without the '.' that separates tokens.
var electionTokenRE = regexp.MustCompile(`^[-/_=a-zA-Z0-9]+$`)

// parseElectionPatterns parses a comma-separated list of election patterns.
func parseElectionPatterns(v string) ([]string, error) {
	var out, problems []string
	for p := range strings.SplitSeq(v, ",") {
		p = strings.TrimSpace(p)
		if err := CheckElectionPattern(p); err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if len(problems) > 0 {
		return nil, invalidf("%s", strings.Join(problems, "; "))
	}
	return out, nil
}

// CheckElectionPattern reports whether p is an election name or pattern:
// dot-separated tokens of letters, digits and - / _ =, where a token may be
// * (any one token) and the last may be > (one or more tokens).
func CheckElectionPattern(p string) error {
	if p == "" {
		return invalidf("an election pattern is empty: list names or patterns such as app-a.> separated by single commas")
	}
	tokens := strings.Split(p, ".")
	for i, t := range tokens {
		switch {
		case t == "*":
		case t == ">" && i == len(tokens)-1:
		case t == ">":
			return invalidf("%q has > before its end: > may only be the last token", p)
		case t == "":
			return invalidf("%q has an empty token: remove the extra dot", p)
		case strings.ContainsAny(t, "*>"):
			return invalidf("%q has the token %q: * and > must be whole tokens between dots (* any one token, a final > one or more), as in %s; a pattern cannot match part of a token", p, t, wildcardExample(tokens, i))
		case !electionTokenRE.MatchString(t):
			return invalidf("%q has the token %q: election names use letters, digits, '-', '/', '_' and '=', with * or > as wildcards", p, t)
		}
	}
	return nil
}

// wildcardExample is pattern tokens with the wildcard in token i made a
// token of its own: app-a* becomes app-a.*, my>x becomes my.>.
func wildcardExample(tokens []string, i int) string {
	t := tokens[i]
	w := "*"
	if strings.Contains(t, ">") {
		w = ">"
	}
	var parts []string
	parts = append(parts, tokens[:i]...)
	if rest := strings.Trim(t, "*>"); rest != "" && !strings.ContainsAny(rest, "*>") {
		parts = append(parts, rest)
	}
	parts = append(parts, w)
	if w == "*" {
		parts = append(parts, tokens[i+1:]...)
	}
	return strings.Join(parts, ".")
}

// parseCipherSuites accepts Go's names of TLS 1.2 cipher suites (TLS 1.3
// suites are not configurable), comma separated.
func parseCipherSuites(v string) ([]string, error) {
	known := map[string]bool{}
	for _, s := range tls.CipherSuites() {
		known[s.Name] = true
	}
	return parseNameList(v, known, "cipher suite", "a secure suite Go supports, such as TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256")
}

// parseCurves accepts Go's names of elliptic curves, comma separated.
func parseCurves(v string) ([]string, error) {
	known := map[string]bool{}
	for _, c := range []tls.CurveID{tls.X25519, tls.CurveP256, tls.CurveP384, tls.CurveP521} {
		known[c.String()] = true
	}
	return parseNameList(v, known, "curve", "X25519, CurveP256, CurveP384 or CurveP521")
}

func parseNameList(v string, known map[string]bool, what, use string) ([]string, error) {
	if v == "" {
		return nil, nil
	}
	var out, problems []string
	for n := range strings.SplitSeq(v, ",") {
		n = strings.TrimSpace(n)
		switch {
		case known[n]:
			out = append(out, n)
		default:
			msg := "unknown " + what + " " + strconv.Quote(n)
			if s := suggest.Nearest(n, slices.Sorted(maps.Keys(known))); s != "" {
				msg += ": did you mean " + s + "?"
			} else {
				msg += ": use " + use
			}
			problems = append(problems, msg)
		}
	}
	if len(problems) > 0 {
		return nil, invalidf("%s", strings.Join(problems, "; "))
	}
	return out, nil
}

// parseSecurityProvider accepts file, the one provider Conclave supports.
func parseSecurityProvider(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	if strings.EqualFold(v, SecurityProviderFile) {
		return SecurityProviderFile, nil
	}
	return "", invalidf("%q is not supported: Conclave supports only %q, with plugin.security.file.certificate, .key and .ca naming PEM files", v, SecurityProviderFile)
}

// parseTLSTimeout accepts a positive duration.
func parseTLSTimeout(v string) (time.Duration, error) {
	d, err := ParseDuration(v)
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, invalidf("%q must be positive, e.g. 2s", v)
	}
	return d, nil
}

// TLSConfigured reports whether the configuration names TLS files.
func (c *Config) TLSConfigured() bool {
	return c.TLSCertificate != "" || c.TLSKey != "" || c.TLSCA != ""
}

// UserNames returns the names of the configured broker users, sorted.
func (c *Config) UserNames() []string { return slices.Sorted(maps.Keys(c.Users)) }

// validateSecurity checks the security keys together.
func (v *validator) security(c *Config) {
	if c.TLSConfigured() {
		var missing []string
		for _, kv := range [][2]string{{"plugin.security.file.certificate", c.TLSCertificate}, {"plugin.security.file.key", c.TLSKey}, {"plugin.security.file.ca", c.TLSCA}} {
			if kv[1] == "" {
				missing = append(missing, kv[0])
			}
		}
		if len(missing) > 0 {
			v.add("TLS needs a certificate, its key and the CA together: set %s", strings.Join(missing, " and "))
		}
	}
	if c.SecurityProvider != "" && c.SecurityProvider != SecurityProviderFile {
		v.add("plugin.security.provider %q is not supported: use %q", c.SecurityProvider, SecurityProviderFile)
	}
	if c.SecurityProvider == SecurityProviderFile && !c.TLSConfigured() {
		v.add("plugin.security.provider is file but no files are named: set plugin.security.file.certificate, .key and .ca")
	}
	if (len(c.CipherSuites) > 0 || len(c.ECCCurves) > 0) && !c.TLSConfigured() {
		v.add("plugin.security.cipher_suites or ecc_curves is set but TLS is not: set plugin.security.file.certificate, .key and .ca")
	}
	if c.NATSPass != "" && c.NATSUser == "" {
		v.add("plugin.nats.pass is set without plugin.nats.user: set the user name too")
	}
	if c.NATSCredentials != "" && c.NATSPass != "" {
		v.add("plugin.nats.credentials and plugin.nats.pass are both set: log in with one of them")
	}
	if (c.PeerUser == "") != (c.PeerPassword == "") {
		v.add("plugin.choria.network.peer_user and peer_password go together: set both, or neither")
	}
	for _, name := range c.UserNames() {
		u := c.Users[name]
		key := UserKeyPrefix + name
		if u.PasswordHash == "" && u.Certificate == "" {
			v.add("%s has no way to log in: set %s.password to a bcrypt hash (`conclave hash-password`) or %s.certificate to its certificate's identity", key, key, key)
		}
		if u.Certificate != "" && !c.TLSConfigured() {
			v.add("%s.certificate needs TLS: set plugin.security.file.certificate, .key and .ca", key)
		}
		if len(u.Campaign) == 0 && len(u.Observe) == 0 && !u.Admin {
			v.add("%s may do nothing: set %s.campaign, %s.observe or %s.admin", key, key, key, key)
		}
	}
	seen := map[string]string{}
	for _, name := range c.UserNames() {
		u := c.Users[name]
		if u.Certificate == "" {
			continue
		}
		if other, dup := seen[u.Certificate]; dup {
			v.add("%s%s.certificate and %s%s.certificate are both %q: a certificate identity maps to one user", UserKeyPrefix, other, UserKeyPrefix, name, u.Certificate)
		}
		seen[u.Certificate] = name
	}
}

// redacted replaces a secret in what String returns.
const redacted = "[redacted]"

// String describes the configuration with every secret (plugin.nats.pass,
// plugin.choria.network.peer_password, users' password hashes) replaced by
// [redacted], so that logging a Config, even with %+v, shows none.
func (c Config) String() string {
	c.NATSPass = redactSecret(c.NATSPass)
	c.PeerPassword = redactSecret(c.PeerPassword)
	users := make([]User, 0, len(c.Users))
	for _, name := range c.UserNames() {
		users = append(users, *c.Users[name])
	}
	c.Users = nil
	type plain Config // without this method
	return strings.TrimSuffix(fmt.Sprintf("%+v", plain(c)), "}") + fmt.Sprintf(" Users:%v}", users)
}

// String describes the user with its password hash replaced by [redacted].
func (u User) String() string {
	u.PasswordHash = redactSecret(u.PasswordHash)
	type plain User
	return fmt.Sprintf("%+v", plain(u))
}

func redactSecret(s string) string {
	if s == "" {
		return ""
	}
	return redacted
}
