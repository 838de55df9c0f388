//go:build race

package cli_test

// raceEnabled says the tests run with the race detector, and so is the binary built.
const raceEnabled = true
