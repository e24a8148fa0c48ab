package supervision

import (
	"errors"
	"fmt"
)

// Errors, for errors.Is. They are grouped by what returns them.
var (
	// ErrInvalidConfig is wrapped by every error of NewStrategy, NewBudget,
	// NewRetryer and Validate.
	ErrInvalidConfig = errors.New("supervision: invalid configuration")

	// Retries (Retryer.Do, Outcome.Error).

	// ErrPermanent marks an error that retrying cannot fix: wrap one with
	// Permanent, and a Retryer gives up at once.
	ErrPermanent = errors.New("supervision: permanent failure")
	// ErrAttemptsExhausted: every attempt allowed failed.
	ErrAttemptsExhausted = errors.New("supervision: attempts exhausted")
	// ErrDeadline: the time allowed for all attempts together passed.
	ErrDeadline = errors.New("supervision: retry deadline passed")

	// Dead letters.

	// ErrNotFound: no dead letter has the sequence number asked for.
	ErrNotFound = errors.New("supervision: dead letter not found")
	// ErrCorrupt: a stored dead letter does not decode. The error names
	// the file and the sequence number.
	ErrCorrupt = errors.New("supervision: corrupt dead letter")
	// ErrFull: the Add of a MemoryDeadLetters at its capacity, or of a
	// BoltDeadLetters at its cap with FailWhenFull.
	ErrFull = errors.New("supervision: dead-letter store full")
	// ErrReadOnly: a write to a store opened with OpenDeadLettersReadOnly.
	ErrReadOnly = errors.New("supervision: dead-letter store is read-only")
)

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

type permanentError struct{ err error }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() []error { return []error{e.err, ErrPermanent} }

// Permanent marks err as one that retrying cannot fix (a request the server
// refuses, a record that does not encode): a Retryer stops at once, and
// errors.Is(Permanent(err), ErrPermanent) holds. The message is err's.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent says whether err or an error it wraps was marked Permanent.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }
