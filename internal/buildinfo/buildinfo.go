// Package buildinfo says which build of Conclave is running, from the
// information the Go toolchain embeds in every binary: the module version
// (a tag for `go install …@v1.2.3`, "(devel)" for a build from a checkout),
// the VCS revision and whether the tree had uncommitted changes, and the Go
// version. The CLI prints it (conclave version) and the broker logs it.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Info is what the binary knows of its build.
type Info struct {
	// Version is the main module's version: a tag such as v1.2.3 when
	// installed with go install, "(devel)" when built from a checkout.
	Version string `json:"version"`
	// Revision is the VCS commit the binary was built from, "" if unknown.
	Revision string `json:"revision"`
	// Time is the commit's time (RFC 3339), "" if unknown.
	Time string `json:"time"`
	// Modified is true when the tree had uncommitted changes.
	Modified bool `json:"modified"`
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string `json:"go_version"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Read returns the running binary's build information.
func Read() Info {
	in := Info{Version: "(unknown)", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return in
	}
	if bi.Main.Version != "" {
		in.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		in.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// String is the build in one line, e.g. "v1.2.0 (revision 0123456789ab,
// 2026-11-23T09:04:16Z, modified; go1.26.8 linux/amd64)".
func (in Info) String() string {
	rev := "revision unknown"
	if in.Revision != "" {
		r := in.Revision
		if len(r) > 12 {
			r = r[:12]
		}
		rev = "revision " + r
		if in.Time != "" {
			rev += ", " + in.Time
		}
		if in.Modified {
			rev += ", modified"
		}
	}
	return fmt.Sprintf("%s (%s; %s %s)", in.Version, rev, in.GoVersion, in.Platform)
}
