package persistence

import "fmt"

// kindError is an error that errors.Is matches against a sentinel (its
// kind) without repeating the sentinel's text in its message.
type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.err, e.kind} }

// errorf formats an error that errors.Is(err, kind) matches.
func errorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, err: fmt.Errorf(format, args...)}
}

// DecodeError says that a stored record does not decode: which one, and
// where. errors.Is(err, ErrDecode) holds for it.
type DecodeError struct {
	File string // the store file; empty for a store in memory
	What string // "event", "snapshot", "checkpoint" or "log entry"
	ID   string // the persistence id, or the job of a checkpoint
	Seq  uint64 // the event's or snapshot's sequence number, the checkpoint's ID, the log entry's position
	Err  error  // why it does not decode
}

func (e *DecodeError) Error() string {
	where := ""
	if e.File != "" {
		where = " in " + e.File
	}
	switch e.What {
	case "event":
		return fmt.Sprintf("persistence: journal %q seq %d%s: decode event: %v", e.ID, e.Seq, where, e.Err)
	case "log entry":
		return fmt.Sprintf("persistence: journal log entry %d%s: decode: %v", e.Seq, where, e.Err)
	case "checkpoint":
		return fmt.Sprintf("persistence: job %q checkpoint %d%s: decode checkpoint: %v", e.ID, e.Seq, where, e.Err)
	default:
		return fmt.Sprintf("persistence: %s %q seq %d%s: decode %s: %v", e.What, e.ID, e.Seq, where, e.What, e.Err)
	}
}

func (e *DecodeError) Unwrap() []error { return []error{e.Err, ErrDecode} }

// RecoveryError is the panic value of an event-sourced actor that cannot
// recover its state: its supervisor receives it as the failure's reason.
type RecoveryError struct {
	ID  string // the persistence id
	Seq uint64 // the sequence number of the snapshot or event that failed (0: before any)
	Err error
}

func (e *RecoveryError) Error() string {
	return fmt.Sprintf("persistence: recover %q at seq %d: %v", e.ID, e.Seq, e.Err)
}

func (e *RecoveryError) Unwrap() error { return e.Err }
