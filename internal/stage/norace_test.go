//go:build !race

package stage

// raceEnabled says the tests run under the race detector.
const raceEnabled = false
