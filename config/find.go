package config

import (
	"os"
	"path/filepath"
)

// EnvConfig names the environment variable holding the path of the
// configuration file; see FindUserConfig.
const EnvConfig = "CONCLAVE_CONFIG"

// SystemConfig is the system-wide configuration file, the last place
// FindUserConfig looks.
const SystemConfig = "/etc/conclave/conclave.conf"

// FindUserConfig returns the configuration file a user means, looking in this
// order:
//
//  1. $CONCLAVE_CONFIG, when set and not empty, whether or not the file exists
//     (so that Load reports a mistyped path);
//  2. conclave.conf in the working directory;
//  3. $XDG_CONFIG_HOME/conclave/conclave.conf, or ~/.config/conclave/conclave.conf
//     when XDG_CONFIG_HOME is unset or not absolute;
//  4. SystemConfig (/etc/conclave/conclave.conf).
//
// It returns the first of 2–4 that exists as a regular file, or "" when none
// does, meaning: run on the defaults and the environment (FromEnv). Paths other
// than $CONCLAVE_CONFIG are absolute.
func FindUserConfig() string {
	return FindUserConfigWithEnv(os.LookupEnv)
}

// FindUserConfigWithEnv is FindUserConfig with the environment (CONCLAVE_CONFIG,
// XDG_CONFIG_HOME and HOME) read through lookup; nil means an empty
// environment.
func FindUserConfigWithEnv(lookup func(string) (string, bool)) string {
	wd, _ := os.Getwd()
	return finder{lookup: lookup, workDir: wd, system: SystemConfig}.find()
}

// finder holds what FindUserConfig depends on, so tests can replace it.
type finder struct {
	lookup  func(string) (string, bool)
	workDir string // "" skips the working directory
	system  string // "" skips the system file
}

// find returns the first configuration file in the search order, or "".
func (f finder) find() string {
	if p := f.env(EnvConfig); p != "" {
		return p
	}
	for _, p := range f.candidates() {
		if isFile(p) {
			return p
		}
	}
	return ""
}

// candidates lists the files to look for, in order.
func (f finder) candidates() []string {
	var paths []string
	if f.workDir != "" {
		paths = append(paths, filepath.Join(f.workDir, "conclave.conf"))
	}
	if dir := f.configHome(); dir != "" {
		paths = append(paths, filepath.Join(dir, "conclave", "conclave.conf"))
	}
	if f.system != "" {
		paths = append(paths, f.system)
	}
	return paths
}

// configHome is $XDG_CONFIG_HOME when absolute, else ~/.config, else "".
func (f finder) configHome() string {
	if dir := f.env("XDG_CONFIG_HOME"); filepath.IsAbs(dir) {
		return dir
	}
	if home := f.env("HOME"); filepath.IsAbs(home) {
		return filepath.Join(home, ".config")
	}
	return ""
}

// env returns the variable's value, "" when unset or lookup is nil.
func (f finder) env(name string) string {
	if f.lookup == nil {
		return ""
	}
	v, _ := f.lookup(name)
	return v
}

// isFile reports whether path exists and is a regular file (or a link to one).
func isFile(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular()
}
