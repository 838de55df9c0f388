//go:build !race

package streams

// raceDetector says the tests run under the race detector.
const raceDetector = false
