//go:build race

package nexmark

// raceEnabled says the tests run under the race detector.
const raceEnabled = true
