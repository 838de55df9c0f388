package config

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

// update rewrites the generated key table of docs/config.md: run go generate
// ./config, or go test ./config -run TestDocsTable -update.
var update = flag.Bool("update", false, "rewrite the key table in docs/config.md from Keys()")

const (
	docsPath   = "../docs/config.md"
	beginTable = "<!-- BEGIN KEYS: generated from config.Keys() -->\n"
	endTable   = "<!-- END KEYS -->\n"
)

// keysTable renders keys as the markdown table in docs/config.md.
func keysTable(keys []Key) string {
	var b strings.Builder
	b.WriteString("| Key | Type | Default | Environment variable | Meaning |\n")
	b.WriteString("|---|---|---|---|---|\n")
	for _, k := range keys {
		env := "`" + k.Env() + "`"
		if k.PerUser() {
			env = "*(file only)*"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n",
			k.Name, k.Type, defaultCell(k), env, strings.ReplaceAll(k.Description, "|", `\|`))
	}
	return b.String()
}

// defaultCell renders a key's default for the table.
func defaultCell(k Key) string {
	switch {
	case k.DefaultIsComputed():
		return k.Default
	case k.Default == "":
		return "*(empty)*"
	}
	return "`" + k.Default + "`"
}

// TestDocsTable fails when the key table in docs/config.md is not the one
// Keys() produces; with -update it rewrites it. The README links to that
// table rather than keeping a copy.
func TestDocsTable(t *testing.T) {
	for _, path := range []string{docsPath} {
		t.Run(path, func(t *testing.T) {
			doc, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			before, rest, ok := bytes.Cut(doc, []byte(beginTable))
			_, after, ok2 := bytes.Cut(rest, []byte(endTable))
			if !ok || !ok2 {
				t.Fatalf("%s has no %q … %q markers", path, beginTable, endTable)
			}
			want := string(before) + beginTable + keysTable(Keys()) + endTable + string(after)
			if string(doc) == want {
				return
			}
			if *update {
				if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
					t.Fatal(err)
				}
				t.Logf("rewrote %s", path)
				return
			}
			t.Errorf("%s is out of date with config.Keys(): run go generate ./config", path)
		})
	}
}

func TestKeyDescriptionsFitTheTable(t *testing.T) {
	for _, k := range Keys() {
		if k.Name == "" || k.Type == "" || k.Description == "" {
			t.Errorf("key %+v lacks a name, type or description", k)
		}
		if strings.ContainsAny(k.Description+k.Type+k.Default, "\n\r") {
			t.Errorf("%s: a table cell cannot hold a line break", k.Name)
		}
		if !strings.HasSuffix(k.Description, ".") {
			t.Errorf("%s: description %q should be a sentence", k.Name, k.Description)
		}
		if k.set == nil && k.setUser == nil {
			t.Errorf("%s has no setter", k.Name)
		}
	}
}
