package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "conclave-demo-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	demoBinary.dir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseSettings(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want settings
	}{
		{"defaults", nil, nil, settings{workers: 10, key: "demo", ttl: 3 * time.Second, metrics: "127.0.0.1:9190"}},
		{"environment", nil, map[string]string{"WORKERS": "5", "KEY": "my_app", "NOSPLAY": "1"},
			settings{workers: 5, key: "my_app", ttl: 3 * time.Second, metrics: "127.0.0.1:9190", noSplay: true}},
		{"flags win", []string{"--workers", "3", "--key=other", "--ttl", "2s", "--metrics", "", "--nosplay=false"},
			map[string]string{"WORKERS": "5", "KEY": "my_app", "NOSPLAY": "1"},
			settings{workers: 3, key: "other", ttl: 2 * time.Second, ttlFlagSet: true}},
		{"config", []string{"--config", "client.conf"}, nil,
			settings{config: "client.conf", workers: 10, key: "demo", ttl: 3 * time.Second, metrics: "127.0.0.1:9190"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSettings(tc.args, env(tc.env), io.Discard)
			if err != nil {
				t.Fatalf("parseSettings: %v", err)
			}
			if got.getenv == nil {
				t.Error("getenv not kept for the configuration's CONCLAVE_* variables")
			}
			got.getenv = nil
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseSettingsErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		says string
	}{
		{"bad WORKERS", nil, map[string]string{"WORKERS": "many"}, `WORKERS="many"`},
		{"no workers", []string{"--workers", "0"}, nil, "0 workers"},
		{"bad NOSPLAY", nil, map[string]string{"NOSPLAY": "sure"}, "NOSPLAY"},
		{"short TTL", []string{"--ttl", "500ms"}, nil, "at least 1s"},
		{"TTL with config", []string{"--config", "c.conf", "--ttl", "5s"}, nil, "cannot go with --config"},
		{"bad key", []string{"--key", "a b"}, nil, "invalid key"},
		{"argument", []string{"extra"}, nil, `unexpected argument "extra"`},
		{"unknown flag", []string{"--bogus"}, nil, "bogus"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseSettings(tc.args, env(tc.env), io.Discard)
			if !errors.Is(err, errUsage) {
				t.Fatalf("error %v does not match errUsage", err)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	var out strings.Builder
	if _, err := parseSettings([]string{"--help"}, env(nil), &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, want := range []string{"Usage: demo", "conclave election watch", "--metrics ADDR", "s   the leader steps down", "Choria's own election demo uses"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage does not mention %q", want)
		}
	}
}
