package config

import (
	"math"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/conclave-io/conclave/bucket"
)

// What each kind of port accepts, as said in error messages.
const (
	clientPortRange = "use 1 to 65535, or -1 for a random free port"
	peerPortRange   = "use 1 to 65535, 0 for no cluster, or -1 for a random free port"
	statsPortRange  = "use 1 to 65535, 0 to turn monitoring off, or -1 for a random free port"
)

// parseString accepts any value.
func parseString(v string) (string, error) { return v, nil }

// parseBool accepts true/false, yes/no, on/off and 1/0 in any case.
func parseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "true", "yes", "on", "1":
		return true, nil
	case "false", "no", "off", "0":
		return false, nil
	}
	return false, invalidf("%q is not a boolean: use true or false (or yes/no, on/off, 1/0)", v)
}

// parseLogLevel accepts debug, info, warn, warning and error in any case and
// returns the lower-case name, with warning as warn.
func parseLogLevel(v string) (string, error) {
	level := strings.ToLower(v)
	if level == "warning" {
		level = "warn"
	}
	if err := checkLogLevel(level); err != nil {
		return "", invalidf("%q is not a log level: use debug, info, warn or error", v)
	}
	return level, nil
}

// checkLogLevel accepts the four canonical level names.
func checkLogLevel(level string) error {
	switch level {
	case "debug", "info", "warn", "error":
		return nil
	}
	return invalidf("%q is not a log level: use debug, info, warn or error (lower case)", level)
}

// parseIdentity accepts a valid NATS server name.
func parseIdentity(v string) (string, error) {
	if err := checkIdentity(v); err != nil {
		return "", err
	}
	return v, nil
}

// CheckIdentity reports whether v can be a node's identity, which is also
// its NATS server name: not empty, without white space, control characters
// or the wildcards * and >. The error says what to use instead.
func CheckIdentity(v string) error { return checkIdentity(v) }

// checkIdentity rejects names a NATS server or subject would choke on: empty,
// white space, control characters and the wildcards * and >.
func checkIdentity(v string) error {
	const use = "use a name without white space, '*' or '>', such as the host name"
	if v == "" {
		return invalidf("is empty: %s (leave identity out to use the host name)", use)
	}
	for _, r := range v {
		switch {
		case unicode.IsSpace(r):
			return invalidf("%q contains white space: %s", v, use)
		case r == '*' || r == '>':
			return invalidf("%q contains the wildcard %q: %s", v, r, use)
		case unicode.IsControl(r):
			return invalidf("%q contains a control character: %s", v, use)
		}
	}
	return nil
}

// parsePort parses a port number that must lie in min..65535 or be RandomPort;
// use says what is valid.
func parsePort(v string, min int, use string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, invalidf("%q is not a port number: %s", v, use)
	}
	if err := checkPort(n, min, use); err != nil {
		return 0, err
	}
	return n, nil
}

// checkPort accepts RandomPort and min..65535.
func checkPort(n, min int, use string) error {
	if n == RandomPort || (n >= min && n <= math.MaxUint16) {
		return nil
	}
	return invalidf("%d is out of range: %s", n, use)
}

func parseClientPort(v string) (int, error) { return parsePort(v, 1, clientPortRange) }
func parsePeerPort(v string) (int, error)   { return parsePort(v, 0, peerPortRange) }
func parseStatsPort(v string) (int, error)  { return parsePort(v, 0, statsPortRange) }

// parseReplicas accepts ClusterSizeReplicas or 1..MaxReplicas.
func parseReplicas(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, invalidf("%q is not a number: %s", v, replicasRange)
	}
	if err := checkReplicas(n); err != nil {
		return 0, err
	}
	return n, nil
}

const replicasRange = "use 1 to 5, or -1 for the cluster size"

// checkReplicas accepts ClusterSizeReplicas or 1..MaxReplicas.
func checkReplicas(n int) error {
	if n == ClusterSizeReplicas || (n >= 1 && n <= bucket.MaxReplicas) {
		return nil
	}
	return invalidf("%d is out of range: %s", n, replicasRange)
}

// parseTTL reads a duration as Choria does (a Go duration, or a bare integer
// meaning seconds) and requires at least bucket.MinTTL.
func parseTTL(v string) (time.Duration, error) {
	d, err := ParseDuration(v)
	if err != nil {
		return 0, err
	}
	if d < bucket.MinTTL {
		return 0, invalidf("%q is too short: use at least %v", v, bucket.MinTTL)
	}
	return d, nil
}

// checkTTL requires at least bucket.MinTTL.
func checkTTL(d time.Duration) error {
	if d < bucket.MinTTL {
		return invalidf("%v is too short: use at least %v", d, bucket.MinTTL)
	}
	return nil
}

// ParseDuration reads a duration as the configuration files, their
// environment overrides and the CLI's duration flags (--timeout, --grace, …)
// write it: whole seconds ("90") or a Go duration ("1m30s", "500ms"). The
// error matches ErrInvalidValue and says what to write instead.
func ParseDuration(v string) (time.Duration, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n > math.MaxInt64/int64(time.Second) || n < math.MinInt64/int64(time.Second) {
			return 0, invalidf("%q seconds is too long a duration: use at most %d seconds", v, math.MaxInt64/int64(time.Second))
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, invalidf("%q is not a duration: use a Go duration such as 30s, 500ms or 1m30s, or whole seconds such as 5", v)
	}
	return d, nil
}

// parseHost accepts an IP address (IPv6 optionally in brackets) or a host
// name, without a port. portKey names the key that holds the port, for the
// error message.
func parseHost(v, portKey string) (string, error) {
	if inner, ok := strings.CutPrefix(v, "["); ok {
		if inner, ok := strings.CutSuffix(inner, "]"); ok && isIP(inner) {
			return inner, nil
		}
	}
	if err := checkHost(v, portKey); err != nil {
		return "", err
	}
	return v, nil
}

// checkHost accepts an IP address or a host name.
func checkHost(v, portKey string) error {
	const use = "use an IP address or a host name, such as 127.0.0.1 or 0.0.0.0 for every interface"
	switch {
	case v == "":
		return invalidf("is empty: %s", use)
	case isIP(v) || isHostName(v):
		return nil
	}
	if _, _, err := net.SplitHostPort(v); err == nil {
		return invalidf("%q includes a port: give the address alone and the port in %s", v, portKey)
	}
	return invalidf("%q is not an IP address or host name: %s", v, use)
}

// isIP reports whether v is an IPv4 or IPv6 address.
func isIP(v string) bool {
	_, err := netip.ParseAddr(v)
	return err == nil
}

// isHostName reports whether v is a DNS name: dot-separated labels of
// letters, digits, '-' and '_', with an optional trailing dot.
func isHostName(v string) bool {
	v = strings.TrimSuffix(v, ".")
	if v == "" || len(v) > 253 {
		return false
	}
	for label := range strings.SplitSeq(v, ".") {
		if !isLabel(label) {
			return false
		}
	}
	return true
}

// isLabel reports whether s is one DNS label.
func isLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if !(r == '-' || r == '_' || r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r))) {
			return false
		}
	}
	return true
}

// urlRule says which URLs a list key accepts.
type urlRule struct {
	schemes     []string // accepted schemes; the first is used for bare host:port
	examplePort int      // port used in examples in error messages
}

func middlewareRule() urlRule { return urlRule{schemes: []string{"nats", "tls"}, examplePort: 4222} }
func peersRule() urlRule      { return urlRule{schemes: []string{"nats"}, examplePort: 5222} }

func parseMiddlewareHosts(v string) ([]string, error) { return parseURLList(v, middlewareRule()) }
func parsePeers(v string) ([]string, error)           { return parseURLList(v, peersRule()) }

// parseURLList parses a comma-separated list of broker URLs; an empty value
// is an empty list. Every bad entry is reported.
func parseURLList(v string, rule urlRule) ([]string, error) {
	if v == "" {
		return nil, nil
	}
	var urls, problems []string
	for entry := range strings.SplitSeq(v, ",") {
		u, err := rule.parse(strings.TrimSpace(entry))
		switch {
		case err != nil:
			problems = append(problems, err.Error())
		case slices.Contains(urls, u):
			problems = append(problems, strconv.Quote(u)+" is listed twice: list each broker once")
		default:
			urls = append(urls, u)
		}
	}
	if len(problems) > 0 {
		return nil, invalidf("%s", strings.Join(problems, "; "))
	}
	return urls, nil
}

// checkURLs reports the first entry of urls the rule rejects.
func checkURLs(urls []string, rule urlRule) error {
	for _, u := range urls {
		if _, err := rule.parse(u); err != nil {
			return err
		}
	}
	return nil
}

// parse turns host:port or scheme://host:port into scheme://host:port.
func (r urlRule) parse(entry string) (string, error) {
	use := r.use()
	if entry == "" {
		return "", invalidf("an entry is empty: %s, separated by single commas", use)
	}
	scheme, rest := r.schemes[0], entry
	if s, after, ok := strings.Cut(entry, "://"); ok {
		scheme, rest = strings.ToLower(s), strings.TrimSuffix(after, "/")
		if !slices.Contains(r.schemes, scheme) {
			return "", invalidf("%q has the scheme %q: %s", entry, s, use)
		}
	}
	if strings.Contains(rest, "@") {
		return "", invalidf("an entry has a user name or password (@): remove it and %s", use)
	}
	if strings.ContainsAny(rest, "/?#") {
		return "", invalidf("%q has a path or query: %s", entry, use)
	}
	host, port, err := net.SplitHostPort(rest)
	switch {
	case err != nil && !strings.Contains(rest, ":"):
		return "", invalidf("%q has no port: %s, e.g. %s:%d", entry, use, rest, r.examplePort)
	case err != nil:
		return "", invalidf("%q is not host:port: %s (IPv6 addresses go in brackets, e.g. [::1]:%d)", entry, use, r.examplePort)
	case !isIP(host) && !isHostName(host):
		return "", invalidf("%q has an invalid host %q: use a host name or IP address", entry, host)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > math.MaxUint16 {
		return "", invalidf("%q has the port %q: use 1 to 65535", entry, port)
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(n)), nil
}

// use says what the rule accepts, for error messages.
func (r urlRule) use() string {
	forms := []string{"host:port"}
	for _, s := range r.schemes {
		forms = append(forms, s+"://host:port")
	}
	if len(forms) == 2 {
		return "use " + forms[0] + " or " + forms[1]
	}
	return "use " + strings.Join(forms[:len(forms)-1], ", ") + " or " + forms[len(forms)-1]
}

// MaxElectionPriority bounds plugin.conclave.election.priority either way,
// as streams.WithPriority does.
const MaxElectionPriority = 1 << 30

const priorityRange = "use a whole number from -1073741824 to 1073741824; higher is preferred"

// parsePriority reads plugin.conclave.election.priority.
func parsePriority(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, invalidf("%q is not a number: %s", v, priorityRange)
	}
	if err := checkPriority(n); err != nil {
		return 0, err
	}
	return n, nil
}

// checkPriority requires ±MaxElectionPriority.
func checkPriority(n int) error {
	if n > MaxElectionPriority || n < -MaxElectionPriority {
		return invalidf("%d is out of range: %s", n, priorityRange)
	}
	return nil
}

// parseMinTerm reads plugin.conclave.election.min_term: 0 or positive.
func parseMinTerm(v string) (time.Duration, error) {
	d, err := ParseDuration(v)
	if err != nil {
		return 0, err
	}
	if err := checkMinTerm(d); err != nil {
		return 0, err
	}
	return d, nil
}

// checkMinTerm refuses a negative minimum term.
func checkMinTerm(d time.Duration) error {
	if d < 0 {
		return invalidf("%v is negative: use a duration such as 30s, or 0 for twice the bucket's TTL (at least 10s)", d)
	}
	return nil
}
