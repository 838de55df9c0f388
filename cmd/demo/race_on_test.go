//go:build race

package main

// raceEnabled says the tests run with the race detector, so the demo binary
// they build has it too.
const raceEnabled = true
