package config

import (
	"os"
	"path/filepath"
	"testing"
)

// touch creates the file at path, with its directories.
func touch(t *testing.T, path string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("# conclave\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestFindUserConfigOrder(t *testing.T) {
	root := t.TempDir()
	var (
		work    = filepath.Join(root, "work")
		home    = filepath.Join(root, "home")
		xdg     = filepath.Join(root, "xdg")
		etc     = filepath.Join(root, "etc", "conclave", "conclave.conf")
		inWork  = filepath.Join(work, "conclave.conf")
		inXDG   = filepath.Join(xdg, "conclave", "conclave.conf")
		inHome  = filepath.Join(home, ".config", "conclave", "conclave.conf")
		explict = filepath.Join(root, "explicit.conf")
	)
	for _, tc := range []struct {
		name  string
		files []string
		env   map[string]string
		want  string
	}{
		{"nothing anywhere", nil, map[string]string{"HOME": home, "XDG_CONFIG_HOME": xdg}, ""},
		{"CONCLAVE_CONFIG wins", []string{inWork, inXDG, inHome, etc}, map[string]string{EnvConfig: explict, "HOME": home}, explict},
		{"CONCLAVE_CONFIG even when missing", nil, map[string]string{EnvConfig: explict}, explict},
		{"empty CONCLAVE_CONFIG is unset", []string{etc}, map[string]string{EnvConfig: ""}, etc},
		{"working directory before XDG", []string{inWork, inXDG, etc}, map[string]string{"XDG_CONFIG_HOME": xdg}, inWork},
		{"XDG before system", []string{inXDG, inHome, etc}, map[string]string{"HOME": home, "XDG_CONFIG_HOME": xdg}, inXDG},
		{"XDG set: ~/.config not read", []string{inHome, etc}, map[string]string{"HOME": home, "XDG_CONFIG_HOME": xdg}, etc},
		{"~/.config without XDG", []string{inHome, etc}, map[string]string{"HOME": home}, inHome},
		{"relative XDG is ignored", []string{inHome}, map[string]string{"HOME": home, "XDG_CONFIG_HOME": "rel"}, inHome},
		{"relative HOME is ignored", []string{inHome, etc}, map[string]string{"HOME": "rel"}, etc},
		{"system file", []string{etc}, map[string]string{"HOME": home}, etc},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range []string{work, home, xdg, filepath.Join(root, "etc")} {
				if err := os.RemoveAll(p); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range tc.files {
				touch(t, p)
			}
			f := finder{lookup: envMap(tc.env), workDir: work, system: etc}
			if got := f.find(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFindUserConfigSkipsDirectories(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "conclave.conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	etc := touch(t, filepath.Join(root, "etc", "conclave.conf"))
	f := finder{workDir: root, system: etc}
	if got := f.find(); got != etc {
		t.Errorf("got %q, want %q: a directory is not a config file", got, etc)
	}
}

func TestFindUserConfigWorkingDirectory(t *testing.T) {
	dir := t.TempDir()
	want := touch(t, filepath.Join(dir, "conclave.conf"))
	t.Chdir(dir)
	got := FindUserConfigWithEnv(envMap(map[string]string{"HOME": t.TempDir()}))
	gotReal, _ := filepath.EvalSymlinks(got)
	wantReal, _ := filepath.EvalSymlinks(want)
	if gotReal == "" || gotReal != wantReal {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestFindUserConfigReadsOSEnvironment(t *testing.T) {
	want := filepath.Join(t.TempDir(), "from-env.conf")
	t.Setenv(EnvConfig, want)
	if got := FindUserConfig(); got != want {
		t.Errorf("got %q, want $%s = %q", got, EnvConfig, want)
	}
}
