//go:build race

package streams

// raceDetector says the tests run under the race detector, which slows the
// simulator's single-threaded seeds about tenfold and finds nothing in them.
const raceDetector = true
