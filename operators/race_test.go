//go:build race

package operators_test

// Under the race detector the job runs several times slower: a shorter job
// gives the crash tests as many kill points. The crash tests run again
// without the race detector in .ci/test's second pass, with 10 000 000
// records and 20 kills; under it they run for the race detector's sake (a
// race in a child that runs to its end fails the test), and 1 000 000
// records and 8 kills still run every restore path (checkpoints restored
// after kills, the output compared with a run never killed) at a third of
// the time 3 000 000 and 20 took (about 140 s a test in a loaded -race run).
const crashRecords = 1_000_000

const crashKills = 8

const crashKillMin = 150 // ms

// raceEnabled says the tests run under the race detector.
const raceEnabled = true
