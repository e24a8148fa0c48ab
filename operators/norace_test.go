//go:build !race

package operators_test

const crashRecords = 10_000_000

const crashKillMin, crashKillSpread = 100, 200
