//go:build race

package stage

// raceEnabled says the tests run under the race detector (pebble runs
// several times slower: the disk timer tests take fewer keys).
const raceEnabled = true
