// Package cluster runs sluice across processes and machines on
// protoactor-go's remote and cluster layers: nodes that find each other, a
// msgpack codec on the wire that decodes only registered types, remote
// actors with request/response, and checkpoints replicated to other nodes
// (the coordinator is the pure state machine of package replication).
//
// # A node
//
// Every process runs one node. Start it with a name, a port and the
// addresses of one or more peers; it listens on one port only (remote and
// membership share it), on 127.0.0.1 unless Config.Host says otherwise:
//
//	reg := cluster.NewRegistry()
//	cluster.Register[Order](reg, "shop.Order") // on every node, same names
//	cluster.Register[*Receipt](reg, "shop.Receipt")
//
//	n, err := cluster.Start(ctx, cluster.Config{
//		Name:     "n1",
//		Port:     7001,
//		Peers:    []string{"127.0.0.1:7002", "127.0.0.1:7003"}, // the others' Host:Port
//		Registry: reg,
//		Store:    "/var/lib/sluice/n1.db", // replicated logs live here
//	})
//	if err != nil { ... }
//	defer n.Stop(ctx)
//
//	cancel := n.Subscribe(func(ev cluster.MemberEvent) { log.Print(ev.Kind, ev.Member.Name) })
//	members, err := n.AwaitMembers(ctx, 3)
//
// Membership with static peers: a node pings its peers every
// FailureTimeout/4 through its own connection; a peer that has not
// answered for FailureTimeout is declared lost (Left), and is fenced: its
// member id can never rejoin, so a node that was declared lost while
// alive (a long pause, a partition) sees Excluded and must restart, with a
// new id; it stops the jobs it coordinates and the instances it hosts, for
// the others take them over. After a pause both sides may have declared
// the other lost: an Excluded answer stands only from a peer with more
// members behind it (or as many, and one of ours), so a node that wakes
// from a pause does not exclude the majority. Peers are seeds: answers carry the addresses their senders know,
// and a node that pings becomes a peer, so one live seed is enough. With a
// discovery service instead, set Config.Provider to one of protoactor's
// providers (see Provider).
//
// # Messages between nodes
//
// protoactor's remote carries protobuf only. The codec packs every value
// sent to another node into an anypb.Any whose type URL names the type's
// registered name ("sluice.msgpack/shop.Order"), msgpack inside (protobuf
// for a registered proto message), and unpacks it on arrival, before the
// actor sees it. A value of an unregistered type is refused when sent
// (Send returns ErrUnregistered); a message naming an unregistered type,
// or whose bytes do not decode, is dropped when received; each is counted
// in Stats().Codec, none is ever decoded into another type, none panics.
// Beneath the codec, a guard on every inbound connection drops protobuf
// types other than protoactor's own and anypb.Any before protoactor's
// deserializer would panic on them.
//
// Actors spawned with Node.Spawn (or from Node.Props, for children) have
// the codec; any node addresses them as (member address, name):
//
//	n.Spawn("billing", actor.PropsFromProducer(newBilling))
//	pid := n.PID(member.Address, "billing")
//	err := n.Send(pid, Order{ID: 7})
//	reply, err := n.Request(ctx, pid, Order{ID: 8}) // ctx bounds the wait
//
// Messages from one sender to one receiver keep their order (one
// connection per pair of nodes). Headers travel with a message sent as an
// *actor.MessageEnvelope: put W3C traceparent there. Node.SpawnOn starts
// one of Config.Kinds on another node.
//
// # Replicated checkpoints
//
// ReplicatedCheckpointStore is a persistence.CheckpointStore: Complete
// writes the checkpoint to the job's log in this node's store and returns
// once Acks of Replicas other nodes hold it too; any node that held it can
// restore it with Latest. The node that completes a job's checkpoints
// leads its log, with an epoch that fences older leaders. Replica states
// (syncing, in-sync, lagging, retrying, failed), their lag and the logs
// each node holds are in Node.Stats; `sluice node status` prints them.
//
// # Distributed jobs
//
// One topology can run across the cluster's members. Every node is given
// the same Config.Jobs (name -> func() *operators.Topology: the same
// binary), and any node starts a job with Run, becoming its coordinator:
//
//	jobs := cluster.Jobs{"wordcount": func() *operators.Topology { return wordCount() }}
//	n, err := cluster.Start(ctx, cluster.Config{Name: "n1", Peers: peers, Jobs: jobs})
//	run, err := cluster.Run(ctx, n, "wordcount", cluster.RunOptions{})
//	err = run.Wait(ctx)
//
// Placement: the coordinator runs the job actor (checkpoint coordinator,
// restarts) and the tasks that read sources or write sinks; every other
// task's instances are dealt evenly over the live members, the
// coordinator included, in the order of their rendezvous scores for (job,
// task), so that tasks start on different members; a generation after a
// member left is placed afresh over the rest. Each node builds the same plan, so
// channel numbers and credit windows agree; a node spawns its instances
// when the coordinator deploys a generation to it, before any source
// starts.
//
// Between nodes, records travel as envelopes encoded with the receiving
// task's envelope codec (the spill's) inside one registered message, on
// the same channels as in one process. Under the Block policy (the
// default) they are credit-gated: a sender sends only as far as its
// receiver granted credits, so a slow receiver slows its
// senders up to the sources, and nothing blocks the connection's
// goroutine (its mailbox never blocks a post; credits bound what is in
// flight). Credits, checkpoint acknowledgements and commits, and finished
// and failed notices are registered messages too; the types are
// operators' Wire* messages, registered by the node itself.
//
// A live change of a job's input (the engine's SetInput: the admin API or
// the desired state, in the coordinator's process) reaches every node
// hosting instances of the operator in two phases: each checks it, then
// each applies it, or, when one refuses, does not answer in time or
// leaves, none keeps it (the change is rejected with that node's reason).
// A node takes a change only for the generation it hosts, from that
// generation's coordinator. Every node reports it with a JobEvent of kind
// JobChanged.
//
// Checkpoints go to a ReplicatedCheckpointStore (RunOptions.Checkpoints,
// or one replicating to two other members and returning after one holds
// each checkpoint). When a member hosting instances leaves (noticed within
// FailureTimeout), the coordinator stops the generation on the others and
// restarts the job from its last completed checkpoint with a new placement
// over the members still there (the job's RestartOnFailure budget, or
// RunOptions' default); a member that comes back hosts instances of later
// generations and jobs. Node.Hosted lists what a node hosts.
//
// protoactor drops the messages queued on a connection that fails, even
// between nodes that stay up (it happens when a node comes back on the same
// address: attempts to reach the dead one end the new connection). So a
// broken connection between two processes of a generation fails it, and
// the job restarts from its checkpoint rather than wait for a credit or a
// notice that will never come; records also carry a sequence number per
// channel, and a gap fails the receiver (operators.ErrLost).
//
// Every overflow policy works on an edge between nodes as within one: the
// receiving instance's mailbox decodes a batch from another node on the
// connection's goroutine, checks its channel's sequence, and only then
// admits it, so a drop, sample, throttle or spill policy sees its records
// one by one and never drops a control envelope, a credit or a commit, and
// its drops leave no sequence gap.
//
// The coordinator's Run.Stats (and so the dashboard and the metrics) cover
// the instances on every node: each node reports its instances' counters
// to the job actor every half second, when an instance finishes, and when
// a generation stops. Record counts are totals over restarts, as in one
// process; queues, drops, spills, blocked time and watermarks are the
// current generation's, up to half a second old for another node's
// instances.
//
// # Coordinator failover
//
// Run records in the job's checkpoint log who coordinates the job (name
// and member id) and which nodes hold copies of the log (the coordinator
// and its replicas); every checkpoint entry carries it, and the job's end
// (ran to its end, failed, drained, or stopped by its context) is recorded
// too. When the coordinator leaves the cluster, the copies still alive
// elect one of them to take the job over: the first in rendezvous order
// for the job stands at once, the others a FailureTimeout apiece later if
// the job is still orphaned. A candidate promises itself the log's next
// epoch and needs the votes of a majority of the copies (itself
// included); a copy votes once per epoch, only for a candidate whose copy
// is at least as up to date as its own (so the winner holds every
// committed checkpoint), and only once the old coordinator is no longer a
// member in its own view. The winner leads the log in the epoch it won
// (the old coordinator, if it is alive somewhere, is fenced: its
// checkpoints fail with ErrFenced) and runs the job from the newest
// checkpoint: sources resume from their checkpointed offsets on the new
// coordinator, sinks reopen there (a sink must reach the same place from
// any node: a shared folder, a database, a message broker). The
// instances the old coordinator had placed on other nodes are stopped
// there when it leaves.
//
//	n.SubscribeJobs(func(ev cluster.JobEvent) {
//		if ev.Kind == cluster.JobTakenOver {
//			log.Printf("took %s over from %s at checkpoint %d", ev.Job, ev.From, ev.Checkpoint)
//			go func() { _ = ev.Run.Wait(ctx) }()
//		}
//	})
//
// Node.Jobs lists the jobs a node coordinates; Stats (and `sluice node
// status`) show who runs the job of each log a node holds. A takeover needs
// the job in the node's Config.Jobs, a majority of the copies alive (the
// default store keeps three copies when the cluster has three members or
// more; with two copies, neither can take over alone), and the default
// checkpoint store (a job whose RunOptions.Checkpoints has a Namespace is
// not taken over). A job's log is replicated to the members present when
// its coordinator starts leading it, and to members that join later while
// it has fewer replicas than the store wants (two, for the default store):
// a node that comes back after a failover becomes a copy again, so the job
// survives the next one. The RunOptions a taken-over job runs with are the
// old coordinator's.
//
// No split brain: a coordinator that has not heard from enough of its
// job's copies, within its lease (9/10 of FailureTimeout), for them to
// elect another coordinator without it stops that job (sources, sinks,
// every instance) and does not restart it: a coordinator cut off from the
// majority stops before the majority's candidate, which stands only once
// it has not heard from the coordinator for two FailureTimeouts, starts
// the job. So at any time at most one node runs a job's sources and sinks,
// given clocks whose rates agree (each side measures the time since its
// own last exchange) and a stop that takes less than about a
// FailureTimeout. Sinks that commit on checkpoints (the file sink,
// transactional database sinks) and are reachable from every copy stay
// as exactly-once across a failover as they are across a restart; the others are at-least-once: what they
// wrote after the last completed checkpoint is written again. These
// leases need the static-peers provider (its pongs tell when a peer was
// last heard from). A LeasedProvider (cluster/etcd's) brings its own: a
// node whose registration's lease runs out, or may have, is fenced as if
// the others had excluded it (it stops the jobs it coordinates and the
// instances it hosts, and must restart); other providers (Consul,
// Kubernetes) fence nothing.
//
// With Config.Leadership (cluster/etcd's Provider.Leadership), each job's
// coordinator is elected in etcd instead, one election per job, and every
// checkpoint is committed there after its replication, by a
// compare-and-swap on the term's fencing token that a stale coordinator
// cannot pass; a copy elected after a coordinator left takes the job over
// only if it holds the checkpoint committed last (see Leadership and
// docs/deployment.md).
//
// Limits of this version: the counts of a node that dies stop at its
// last report (up to half a second of them are missing from the totals);
// a deployment to a member that is dying fails after RequestTimeout and
// costs a restart; a job its coordinator stopped for its lease while the
// copies it did not hear from still hear from it (an asymmetric cut) is
// resumed by nobody while they do: they take a job over only from a
// coordinator they declared lost.
//
// # Security
//
// With Config.TLS, the listener and every outbound connection use mutual
// TLS 1.3: a node without a certificate from the cluster's CA can neither
// join nor send. A node's name is bound to its certificate: it must be one
// of the certificate's DNS SANs, and a connection whose member id names
// another node is refused (Start refuses a certificate that does not name
// the node). Each envelope must come from an actor at the address the
// connection's peer listens on, and every message that names its sender
// (pings, pongs, appends and their answers, claims and votes,
// deployments, failure notices, stats) must name that peer; the cluster's
// own messages come from members only, but for the pings and pongs through
// which a node joins, and a pong counts only when it answers a ping of
// this node. Answers to an append count only from a replica of the log,
// for an append sent to it in the leader's epoch; claims only from a copy
// of the log; a request's reply only from the node asked. protoactor's
// system messages are refused from the network (Stop, PoisonPill, ...)
// but for Watch, Unwatch, Terminated and DeadLetterResponse. A distributed
// job's own messages are checked against the generation's placement: a
// checkpoint acknowledgement, a finished notice or statistics that speak
// for an instance, records on a channel, or credits for a receiver are
// taken only from the member that runs that instance, sender or receiver,
// and barriers, commits and drains only from the job actor's member;
// anything else is dropped (records without failing the instance) and
// counted as "instance". So a member cannot acknowledge a checkpoint with
// state of its own for an instance it does not run. A non-member gets no
// Stats unless Config.StatusClients names it. Every refusal is counted in
// Stats().Auth, by reason, and the first of each reason is logged as a
// warning (then at most one a minute).
//
// Without TLS nothing is authenticated: a node on a host other than
// loopback does not start without TLS unless Config.Insecure says so, and
// on loopback it warns.
//
// Every listener binds Config.Host; protoactor's
// automanaged provider is not used, since its health server binds
// 0.0.0.0 (the static-peers provider replaces it).
//
// # Caveats
//
//   - One node per process: protoactor's remote sets gRPC's global logger
//     whenever it starts, which races with another node's gRPC goroutines
//     (the tests run extra nodes in child processes).
//   - A node is hosted by an actors.System (Config.System, or its own).
//     Stop the node before the System: the System does not know about
//     remote and its Stop would leave the listener running.
//   - protoactor's gossip is stopped (it reads the member list without
//     its lock); grains and pub-sub, which need it, are not offered.
//     protoactor also reads its block list without its lock when a node
//     connects; the static-peers provider orders its updates with those
//     reads, other providers update it from their own goroutines.
//   - Messages from other nodes are posted to mailboxes from the
//     connection's goroutine: a mailbox that blocks stalls the connection.
//     Flow control across nodes belongs to the operators runtime (credits).
package cluster
