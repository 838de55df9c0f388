package broker_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		// A broker child process for the durability test: no leak check,
		// it is killed.
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}
