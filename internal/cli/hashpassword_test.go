package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/conclave-io/conclave/config"
)

func hashPassword(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(context.Background(), append([]string{"hash-password"}, args...), strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestHashPasswordPrintsAHashTheBrokerAccepts: the printed hash verifies
// against the password, and config accepts it as a user's password.
func TestHashPasswordPrintsAHashTheBrokerAccepts(t *testing.T) {
	t.Parallel()
	code, out, errOut := hashPassword(t, "correct horse\n", "--stdin", "--cost", "10")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	hash := strings.TrimSpace(out)
	if err := bcrypt.CompareHashAndPassword([]byte(hash), []byte("correct horse")); err != nil {
		t.Fatalf("%q does not verify: %v", hash, err)
	}
	if c, _ := bcrypt.Cost([]byte(hash)); c != 10 {
		t.Errorf("cost %d, want 10", c)
	}
	if strings.Contains(out+errOut, "correct horse") {
		t.Error("the password was echoed")
	}
	if !strings.Contains(errOut, "plugin.conclave.user.NAME.password") {
		t.Errorf("no hint where the hash goes: %s", errOut)
	}
	text := "plugin.conclave.user.ops.password = " + hash + "\nplugin.conclave.user.ops.admin = true\n"
	if _, err := config.ParseWithEnv(strings.NewReader(text), "b.conf", nil); err != nil {
		t.Errorf("config refuses the hash: %v", err)
	}
}

func TestHashPasswordRefusesBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"empty", "\n", []string{"--stdin"}, "the password is empty"},
		{"nothing", "", nil, "the password is empty"},
		{"too long", strings.Repeat("x", 73) + "\n", []string{"--stdin"}, "bcrypt uses only the first 72"},
		{"weak cost", "pw\n", []string{"--stdin", "--cost", "4"}, "--cost 4: use 10 to 31"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := hashPassword(t, tc.stdin, tc.args...)
			if code == 0 || out != "" || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want failure saying %q", code, out, errOut, tc.want)
			}
		})
	}
}
