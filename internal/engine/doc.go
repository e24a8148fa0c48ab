// Package engine is sluice's runtime: it runs the plan of a topology
// (package graph) as actors. An instance per task and parallel slot drives
// the task's chain of stages (package stage), sends batches on
// credit-gated channels and takes part in checkpoints; a job actor per run
// drives the pure machines of package coord (the checkpoint coordinator,
// the job lifecycle); the messages between them are package wire, in one
// process and across processes, where package cluster implements the seam
// of package dist.
//
// Job is a topology's actors.Job. Package cluster reaches the engine for
// what only a runner needs: Of finds the topology under a user's, Configure
// adds the cluster's settings (Distribute, a checkpoint store, a restart
// policy), HostGeneration runs another process's share of a generation,
// and Abort, PlacementOf and AddressOf inspect or stop a run.
package engine
