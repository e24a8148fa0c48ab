//go:build !race

package operators_test

const crashRecords = 10_000_000

const crashKillMin = 100 // ms

// raceEnabled says the tests run under the race detector.
const raceEnabled = false
