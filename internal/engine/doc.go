// Package engine is sluice's runtime: the logical graph a topology is built
// into (nodes, validation), the planner that fuses operators into tasks and
// wires their channels, and the actors that run them (an instance per task
// and parallel slot, driving the chain of stages of package stage; a job
// actor per run, driving the pure machines of package coord).
//
// Users never import it: package operators is the typed API over it, and
// wraps every value it hands out (streams, options, windows, errors) so
// that no type of this package shows there. Package cluster reaches it for
// what only a runner needs: Of finds the engine topology under a user's,
// Configure adds the cluster's settings (Distribute, a checkpoint store, a
// restart policy), HostGeneration runs another process's share of a
// generation, and Abort, PlacementOf and AddressOf inspect or stop a run.
//
// The messages between the actors are package wire; the seam to package
// cluster is package dist.
package engine
