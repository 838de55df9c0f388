package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestEnvNames(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"identity", "CONCLAVE_IDENTITY"},
		{"plugin.choria.network.client_port", "CONCLAVE_PLUGIN_CHORIA_NETWORK_CLIENT_PORT"},
		{"plugin.choria.network.stream.leader_election_ttl", "CONCLAVE_PLUGIN_CHORIA_NETWORK_STREAM_LEADER_ELECTION_TTL"},
	} {
		if got := (Key{Name: tc.key}).Env(); got != tc.want {
			t.Errorf("Env(%s) = %s, want %s", tc.key, got, tc.want)
		}
	}
	seen := map[string]string{EnvConfig: "(the config file path)"}
	for _, k := range Keys() {
		env := k.Env()
		if k.PerUser() {
			if env != "" {
				t.Errorf("per-user key %s has the variable %s", k.Name, env)
			}
			continue
		}
		if other, dup := seen[env]; dup {
			t.Errorf("%s and %s share the variable %s", k.Name, other, env)
		}
		seen[env] = k.Name
		if strings.ContainsAny(env, ".-") || env != strings.ToUpper(env) {
			t.Errorf("%s: %s is not a portable variable name", k.Name, env)
		}
	}
}

// TestEnvSetsEveryKey sets each valid value through the environment instead of
// the file.
func TestEnvSetsEveryKey(t *testing.T) {
	index := keyIndex(Keys())
	for _, tc := range validCases() {
		if tc.value == "" || index[tc.key].PerUser() {
			continue // an empty variable counts as unset; users come from files only
		}
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			env := map[string]string{index[tc.key].Env(): tc.value}
			c := mustParse(t, needs(tc.key), env)
			if got := tc.get(c); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("$%s=%q: got %#v, want %#v", index[tc.key].Env(), tc.value, got, tc.want)
			}
		})
	}
}

func TestEnvOverridesFile(t *testing.T) {
	file := "identity = n1\nplugin.choria.network.client_port = 4333\nloglevel = debug\n"
	env := map[string]string{
		"CONCLAVE_IDENTITY":                          "n2",
		"CONCLAVE_PLUGIN_CHORIA_NETWORK_CLIENT_PORT": " 4444 ",
		"CONCLAVE_LOGLEVEL":                          "", // empty: unset
		"CONCLAVE_UNRELATED":                         "ignored",
	}
	c := mustParse(t, file, env)
	if c.Identity != "n2" || c.ClientPort != 4444 || c.LogLevel != "debug" {
		t.Errorf("got identity %q, client port %d, log level %q; want n2, 4444, debug", c.Identity, c.ClientPort, c.LogLevel)
	}
}

func TestEnvOverrideFeedsValidate(t *testing.T) {
	env := map[string]string{"CONCLAVE_PLUGIN_CHORIA_BROKER_NETWORK": "on"}
	_, err := parseText(t, "identity = n1\n", env)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "plugin.choria.network.stream.store is empty") {
		t.Errorf("got %v, want Validate to reject broker_network without a store", err)
	}
}

func TestEnvBadValues(t *testing.T) {
	env := map[string]string{
		"CONCLAVE_PLUGIN_CHORIA_NETWORK_CLIENT_PORT":                "abc",
		"CONCLAVE_PLUGIN_CHORIA_NETWORK_STREAM_LEADER_ELECTION_TTL": "10ms",
	}
	_, err := parseText(t, "identity = n1\nplugin.choria.stats_port = x\n", env)
	errs := flatten(err)
	if len(errs) != 3 {
		t.Fatalf("got %d errors, want 3 (one file, two environment):\n%v", len(errs), err)
	}
	var le *LineError
	if !errors.As(errs[0], &le) || le.Line != 2 {
		t.Errorf("first error %q: want the file's line 2", errs[0])
	}
	want := []struct{ env, key, msg string }{
		{"CONCLAVE_PLUGIN_CHORIA_NETWORK_CLIENT_PORT", "plugin.choria.network.client_port", `"abc" is not a port number`},
		{"CONCLAVE_PLUGIN_CHORIA_NETWORK_STREAM_LEADER_ELECTION_TTL", "plugin.choria.network.stream.leader_election_ttl", `"10ms" is too short: use at least 1s`},
	}
	for i, w := range want {
		var ee *EnvError
		if !errors.As(errs[i+1], &ee) {
			t.Fatalf("error %q (%T) is not an *EnvError", errs[i+1], errs[i+1])
		}
		if ee.Var != w.env || ee.Key != w.key || !errors.Is(ee, ErrInvalidValue) {
			t.Errorf("got var %s key %s (%v), want %s %s matching ErrInvalidValue", ee.Var, ee.Key, ee, w.env, w.key)
		}
		if msg := ee.Error(); !strings.HasPrefix(msg, "$"+w.env+": "+w.key+": ") || !strings.Contains(msg, w.msg) {
			t.Errorf("message %q: want the variable, the key and %q", msg, w.msg)
		}
	}
}

func TestNilLookupMeansNoEnvironment(t *testing.T) {
	t.Setenv("CONCLAVE_IDENTITY", "from-env")
	c, err := ParseWithEnv(strings.NewReader("identity = n1"), "x", nil)
	if err != nil || c.Identity != "n1" {
		t.Errorf("got %v, %v; want identity n1", c, err)
	}
}

func TestFromEnv(t *testing.T) {
	c, err := FromEnv(envMap(map[string]string{"CONCLAVE_IDENTITY": "n9"}))
	if err != nil || c.Identity != "n9" || c.ClientPort != 4222 {
		t.Fatalf("got %+v, %v; want defaults with identity n9", c, err)
	}
	_, err = FromEnv(envMap(map[string]string{"CONCLAVE_PLUGIN_CHORIA_BROKER_NETWORK": "true"}))
	if !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), "config: ") {
		t.Errorf("got %v, want a validation error starting with \"config: \"", err)
	}
	var ee *EnvError
	if _, err := FromEnv(envMap(map[string]string{"CONCLAVE_LOGLEVEL": "loud"})); !errors.As(err, &ee) || ee.Var != "CONCLAVE_LOGLEVEL" {
		t.Errorf("got %v, want an *EnvError for CONCLAVE_LOGLEVEL", err)
	}
}
