package bank

import (
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/persistence"
)

// Account is the state of an account: what its events add up to. Amounts
// are in cents. It is a value: Apply never changes the Account it is given
// (the Received map is copied before it changes).
type Account struct {
	ID      string
	Open    bool
	Balance int64
	// History is the number of events the account has recorded.
	History uint64
	// LastTransfer is the number of the last transfer it sent (its
	// transfers are numbered 1, 2, 3, ...).
	LastTransfer uint64
	// Outgoing is the transfer it sent that is neither settled nor
	// refunded yet, if any: its amount has left the balance and not yet
	// arrived anywhere. An account has at most one.
	Outgoing *Transfer
	// Received holds, for each account that sent it transfers, the number
	// of the last one it received: a transfer delivered twice counts once.
	Received map[string]uint64
}

// Transfer is a transfer on its way out of an account.
type Transfer struct {
	ID     uint64 // its number among the sender's transfers
	To     string
	Amount int64
}

// Command is a command to an account actor: Open, Deposit or Withdraw (and
// the legs of a transfer, which the Bank sends). persistence.GetState asks
// for the Account.
type Command interface{ command() }

// Open opens an account with an initial balance.
type Open struct {
	Initial int64
	At      time.Time
}

// Deposit adds Amount (> 0) to the balance.
type Deposit struct {
	Amount int64
	At     time.Time
}

// Withdraw takes Amount (> 0) from the balance; it is refused with
// ErrInsufficientFunds when the balance is smaller.
type Withdraw struct {
	Amount int64
	At     time.Time
}

// The legs of a transfer (see Bank.Transfer).
type (
	sendTransfer struct {
		To     string
		Amount int64
		At     time.Time
	}
	receiveTransfer struct {
		From   string
		ID     uint64
		Amount int64
		At     time.Time
	}
	settleTransfer struct {
		ID uint64
		At time.Time
	}
	refundTransfer struct {
		ID uint64
		At time.Time
	}
)

func (Open) command()            {}
func (Deposit) command()         {}
func (Withdraw) command()        {}
func (sendTransfer) command()    {}
func (receiveTransfer) command() {}
func (settleTransfer) command()  {}
func (refundTransfer) command()  {}

// Event is an event of an account: what a command changed. Each carries
// the time of its operation (At), which When returns.
type Event interface {
	When() time.Time
	apply(Account) Account
}

// The events of an account.
type (
	Opened struct {
		Initial int64
		At      time.Time
	}
	Deposited struct {
		Amount int64
		At     time.Time
	}
	Withdrawn struct {
		Amount int64
		At     time.Time
	}
	// TransferSent: the amount left the sender, on its way to To.
	TransferSent struct {
		ID     uint64
		To     string
		Amount int64
		At     time.Time
	}
	// TransferReceived: the amount of transfer ID of From arrived.
	TransferReceived struct {
		From   string
		ID     uint64
		Amount int64
		At     time.Time
	}
	// TransferSettled: the receiver has the amount; the sender is done.
	TransferSettled struct {
		ID uint64
		At time.Time
	}
	// TransferRefunded: the receiver refused the transfer, and the amount
	// went back to the sender (the saga's compensation).
	TransferRefunded struct {
		ID     uint64
		Amount int64
		At     time.Time
	}
)

func (e Opened) When() time.Time           { return e.At }
func (e Deposited) When() time.Time        { return e.At }
func (e Withdrawn) When() time.Time        { return e.At }
func (e TransferSent) When() time.Time     { return e.At }
func (e TransferReceived) When() time.Time { return e.At }
func (e TransferSettled) When() time.Time  { return e.At }
func (e TransferRefunded) When() time.Time { return e.At }

func (e Opened) apply(a Account) Account {
	a.Open, a.Balance = true, a.Balance+e.Initial
	return a
}

func (e Deposited) apply(a Account) Account { a.Balance += e.Amount; return a }
func (e Withdrawn) apply(a Account) Account { a.Balance -= e.Amount; return a }

func (e TransferSent) apply(a Account) Account {
	a.Balance -= e.Amount
	a.LastTransfer = e.ID
	a.Outgoing = &Transfer{ID: e.ID, To: e.To, Amount: e.Amount}
	return a
}

func (e TransferReceived) apply(a Account) Account {
	a.Balance += e.Amount
	received := maps.Clone(a.Received)
	if received == nil {
		received = map[string]uint64{}
	}
	received[e.From] = e.ID
	a.Received = received
	return a
}

func (e TransferSettled) apply(a Account) Account { a.Outgoing = nil; return a }

func (e TransferRefunded) apply(a Account) Account {
	a.Balance += e.Amount
	a.Outgoing = nil
	return a
}

// ErrRefused is matched (errors.Is) by every refusal of a command: an
// error that the account decided, having changed nothing. Other errors
// (a failed journal write, a timeout) leave the outcome to be checked.
var ErrRefused = errors.New("bank: refused")

// The reasons of refusals. Each matches ErrRefused too.
var (
	ErrInsufficientFunds error = refusal("insufficient funds")
	ErrNotOpen           error = refusal("account not open")
	ErrAlreadyOpen       error = refusal("account already open")
	ErrInvalidAmount     error = refusal("invalid amount")
	ErrSameAccount       error = refusal("transfer to the same account")
	ErrTransferPending   error = refusal("a transfer of the account is pending")
)

type refusal string

func (r refusal) Error() string      { return string(r) }
func (refusal) Is(target error) bool { return target == ErrRefused }

// Events returns the registry of the account events: their names in the
// journal.
func Events() *persistence.Registry {
	return persistence.NewRegistry().
		Register("opened", Opened{}).
		Register("deposited", Deposited{}).
		Register("withdrawn", Withdrawn{}).
		Register("transfer-sent", TransferSent{}).
		Register("transfer-received", TransferReceived{}).
		Register("transfer-settled", TransferSettled{}).
		Register("transfer-refunded", TransferRefunded{})
}

// AccountConfig configures one account actor.
type AccountConfig struct {
	// ID is the account's name; its persistence id is "bank/" + ID.
	// Required.
	ID string
	// Journal keeps the account's events. Required.
	Journal persistence.Journal
	// Snapshots keeps the newest snapshot of the account (nil: none,
	// recovery replays every event).
	Snapshots persistence.SnapshotStore
	// SnapshotEvery takes a snapshot every so many events (0: never).
	SnapshotEvery uint64
	// OnApply, when set, is called for every event applied, during
	// recovery and after commands (the Bank counts them).
	OnApply func(Event)
}

// PersistenceID returns the persistence id of the account called id.
func PersistenceID(id string) string { return "bank/" + id }

// NewAccount returns a producer of the event-sourced actor of an account,
// for actors.System.Spawn. It answers a command with the Account after it
// (or with the command's error: a refusal, or the journal's error), and
// persistence.GetState with the Account.
func NewAccount(cfg AccountConfig) (actor.Producer, error) {
	if cfg.ID == "" {
		return nil, errors.New("bank: account: empty ID")
	}
	id := cfg.ID
	return persistence.EventSourced(persistence.Behavior[Account, Command, Event]{
		ID:            PersistenceID(id),
		Journal:       cfg.Journal,
		Snapshots:     cfg.Snapshots,
		Events:        Events(),
		Initial:       func() Account { return Account{ID: id} },
		Handle:        handle,
		Apply:         applier(cfg.OnApply),
		SnapshotEvery: cfg.SnapshotEvery,
	})
}

func applier(onApply func(Event)) func(Account, Event) Account {
	return func(a Account, e Event) Account {
		if onApply != nil {
			onApply(e)
		}
		a = e.apply(a)
		a.History++
		return a
	}
}

// handle decides: it checks a command against the state and returns the
// events that record it, or the refusal. A nil reply answers with the
// state after the events.
func handle(a Account, cmd Command) ([]Event, any, error) {
	refuse := func(op string, reason error) ([]Event, any, error) {
		return nil, nil, fmt.Errorf("bank: account %q: %s: %w", a.ID, op, reason)
	}
	if _, opening := cmd.(Open); !opening && !a.Open {
		return refuse(describe(cmd), ErrNotOpen)
	}
	switch c := cmd.(type) {
	case Open:
		if a.Open {
			return refuse(describe(cmd), ErrAlreadyOpen)
		}
		if c.Initial < 0 {
			return refuse(describe(cmd), ErrInvalidAmount)
		}
		return []Event{Opened{Initial: c.Initial, At: c.At}}, nil, nil
	case Deposit:
		if c.Amount <= 0 {
			return refuse(describe(cmd), ErrInvalidAmount)
		}
		return []Event{Deposited{Amount: c.Amount, At: c.At}}, nil, nil
	case Withdraw:
		if c.Amount <= 0 {
			return refuse(describe(cmd), ErrInvalidAmount)
		}
		if c.Amount > a.Balance {
			return refuse(fmt.Sprintf("%s from a balance of %d", describe(cmd), a.Balance), ErrInsufficientFunds)
		}
		return []Event{Withdrawn{Amount: c.Amount, At: c.At}}, nil, nil
	case sendTransfer:
		switch {
		case c.Amount <= 0:
			return refuse(describe(cmd), ErrInvalidAmount)
		case c.To == a.ID:
			return refuse(describe(cmd), ErrSameAccount)
		case a.Outgoing != nil:
			return refuse(fmt.Sprintf("%s: transfer %d to %q", describe(cmd), a.Outgoing.ID, a.Outgoing.To), ErrTransferPending)
		case c.Amount > a.Balance:
			return refuse(fmt.Sprintf("%s from a balance of %d", describe(cmd), a.Balance), ErrInsufficientFunds)
		}
		return []Event{TransferSent{ID: a.LastTransfer + 1, To: c.To, Amount: c.Amount, At: c.At}}, nil, nil
	case receiveTransfer:
		if a.Received[c.From] >= c.ID {
			return nil, nil, nil // delivered before
		}
		return []Event{TransferReceived{From: c.From, ID: c.ID, Amount: c.Amount, At: c.At}}, nil, nil
	case settleTransfer:
		if a.Outgoing == nil || a.Outgoing.ID != c.ID {
			return nil, nil, nil // settled or refunded before
		}
		return []Event{TransferSettled{ID: c.ID, At: c.At}}, nil, nil
	case refundTransfer:
		if a.Outgoing == nil || a.Outgoing.ID != c.ID {
			return nil, nil, nil
		}
		return []Event{TransferRefunded{ID: c.ID, Amount: a.Outgoing.Amount, At: c.At}}, nil, nil
	}
	return nil, nil, fmt.Errorf("bank: account %q: %T is not a command", a.ID, cmd)
}

// describe names a command in errors.
func describe(cmd Command) string {
	switch c := cmd.(type) {
	case Open:
		return fmt.Sprintf("open with %d cents", c.Initial)
	case Deposit:
		return fmt.Sprintf("deposit %d cents", c.Amount)
	case Withdraw:
		return fmt.Sprintf("withdraw %d cents", c.Amount)
	case sendTransfer:
		return fmt.Sprintf("transfer %d cents to %q", c.Amount, c.To)
	case receiveTransfer:
		return fmt.Sprintf("receive transfer %d of %q (%d cents)", c.ID, c.From, c.Amount)
	case settleTransfer:
		return fmt.Sprintf("settle transfer %d", c.ID)
	case refundTransfer:
		return fmt.Sprintf("refund transfer %d", c.ID)
	}
	return fmt.Sprintf("%T", cmd)
}
