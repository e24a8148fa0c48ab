//go:build !race

package operators_test

const crashRecords = 10_000_000

// crashKills is how many SIGKILLs a crash test lands (fewer under the race
// detector: race_test.go).
const crashKills = 20

const crashKillMin = 100 // ms

// raceEnabled says the tests run under the race detector.
const raceEnabled = false
