//go:build race

package operators_test

// Under the race detector the job runs several times slower: a shorter job
// gives the crash test as many kill points.
const crashRecords = 3_000_000

const crashKillMin = 150 // ms

// raceEnabled says the tests run under the race detector.
const raceEnabled = true
