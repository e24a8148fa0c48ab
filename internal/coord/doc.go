// Package coord holds the coordination logic of a job as pure state
// machines: the checkpoint coordinator (Checkpoints) and the job lifecycle
// (Job). Each is a value with a Step method that takes an event and returns
// the new state and the actions to carry out; Step does no I/O, reads no
// clock (events carry their time) and starts no goroutine. The job actor
// of internal/engine translates messages into events and carries out the
// actions, as etcd raft's node drives its core.
//
// Events and actions are sealed: each machine's are the types of this
// package that implement its event or action interface.
//
// Tests replay transcripts (testdata/*.txt, datadriven format): each
// command is an event, each result the actions and the state after it;
// go test -rewrite rewrites the results.
package coord
