// Package bank is the sample of an embedded event-sourced actor: a
// bank-account application that uses sluice actors without a topology.
// Every account is a persistence.EventSourced actor whose events are kept in
// the system's bbolt store, with a snapshot every N events; a new system on
// the same file recovers each account from its newest snapshot and the
// events after it.
//
// # Basics
//
// An account's state is an Account (balance, history count, the transfer
// it has in flight). Its commands are Open, Deposit and Withdraw. Its
// command handler checks a command against the state and returns the
// events that record it (Opened, Deposited, Withdrawn, and the Transfer*
// events), or a refusal; its event handler adds an event to the state. The
// actor persists the events, and only once they are durable applies them
// and replies with the new Account, or with the error.
//
// A Bank spawns the account actors on a System as they are first used,
// under a supervisor, and serialises the transfers of each account:
//
//	sys, err := actors.NewSystem(actors.Config{Store: "bank.db"})
//	db, err := sys.DB()
//	journal, err := persistence.NewBoltJournal(db)
//	snapshots, err := persistence.NewBoltSnapshotStore(db)
//	b, err := bank.NewBank(sys, bank.Config{Journal: journal, Snapshots: snapshots, SnapshotEvery: 50})
//
//	_, err = b.Open(ctx, "alice", 10_000, time.Now())     // cents
//	_, err = b.Withdraw(ctx, "alice", 20_000, time.Now()) // errors.Is(err, bank.ErrInsufficientFunds)
//	err = b.Transfer(ctx, "alice", "bob", 2_500, time.Now())
//	acct, err := b.Account(ctx, "alice") // acct.Balance: 7500 if bob's account is open
//
//	// Stop in this order: the accounts, the journal (it compacts its log), the system.
//	err = b.Close(ctx)
//	err = journal.Close()
//	err = sys.Stop(ctx)
//
// Every refusal matches ErrRefused and its reason (ErrInsufficientFunds,
// ErrNotOpen, ...) with errors.Is, and changes nothing. Any other error
// (the journal failed, ctx ended) is not the account's decision: ask it
// for its state (Account) before trying again. A transfer's error says
// what became of the transfer (see below). To
// talk to an account without a Bank, spawn NewAccount's producer and send
// it commands with Ref.Request or an actortest.Probe.
//
// # Transfers
//
// A transfer touches two accounts, two actors, each with its own journal:
// no single write covers both. Bank.Transfer runs it as a small saga: the
// sender records TransferSent (the amount leaves it and is its Outgoing
// transfer); the receiver records TransferReceived (once per transfer: it
// remembers the last one it received from each sender); the sender records
// TransferSettled, or TransferRefunded when the receiver refused (the
// compensation: the error matches ErrRefunded). A step that cannot be
// recorded leaves the transfer pending (ErrPending), in the sender's state
// and journal: the sender's next transfer, or Bank.Resume, completes it, on
// this system or after a restart. The money is always in one place.
//
// # Failures
//
// A failed journal write is the command's reply and changes nothing. A
// recovery that fails (a corrupt or missing event) makes the actor panic
// with a *persistence.RecoveryError; the supervisor (Config.Supervision,
// on the System's clock) restarts it after a backoff, and stops it when its
// restart budget is spent. The Bank then answers the calls on that
// account, those waiting included, with the RecoveryError.
//
// # The sample
//
// Run executes a Workload, a deterministic series of random deposits,
// withdrawals and transfers drawn from a seed, on a first system; stops
// it; recovers every account on a second system on the same file; and
// reads the balances and the journal. Expected replays the same workload
// on a plain map: the independent computation the balances must equal.
// The Sample (`sluice run bank --accounts 100 --ops 10000 --seed 1
// --snapshot-every 50`) runs the bank when its job opens its source, then
// streams the journal's events through DepositsPerMinute, a windowed
// aggregate of the deposits of each account per minute:
//
//	journal (source) -> time -> deposits (filter) ==hash by account==> deposits-per-minute -> collect (sink)
//
// Its report checks the balances, the refusals and every window against
// the direct computation.
//
// # Testing
//
// bank_test.go tests it with the test kit only: an actortest.Probe sends
// the commands and expects the replies, across a restart on the same file;
// persisttest's faulty stores fail a write, fill the disk, corrupt a read;
// a clocktest.Manual moves the supervisor's backoff; optest drives the
// windowed aggregate through a checkpoint, a crash and an injected failure.
package bank
