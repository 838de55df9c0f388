package streams_test

import "os"

func mustTempDir() string {
	dir, err := os.MkdirTemp("", "conclave-example-")
	if err != nil {
		panic(err)
	}
	return dir
}
