package config

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

// update rewrites the generated parts of docs/config.md: run
// go generate ./config, or go test ./config -run TestDocsTable -update.
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
		fmt.Fprintf(&b, "| `%s` | %s | %s | `%s` | %s |\n",
			k.Name, k.Type, defaultCell(k), k.Env(), strings.ReplaceAll(k.Description, "|", `\|`))
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

// TestDocsTable fails when the table in docs/config.md is not the one Keys()
// produces; with -update it rewrites it.
func TestDocsTable(t *testing.T) {
	doc, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := bytes.Cut(doc, []byte(beginTable))
	_, after, ok2 := bytes.Cut(rest, []byte(endTable))
	if !ok || !ok2 {
		t.Fatalf("%s has no %q … %q markers", docsPath, beginTable, endTable)
	}
	want := string(before) + beginTable + keysTable(Keys()) + endTable + string(after)
	if string(doc) == want {
		return
	}
	if *update {
		if err := os.WriteFile(docsPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", docsPath)
		return
	}
	t.Errorf("%s is out of date with config.Keys(): run go generate ./config", docsPath)
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
		if k.set == nil {
			t.Errorf("%s has no setter", k.Name)
		}
	}
}
