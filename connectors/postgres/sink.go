package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicehq/sluice/internal/msgpacksafe"
	"github.com/sluicehq/sluice/operators"
	"github.com/sluicehq/sluice/supervision"
)

// CheckpointTable is the table in which every sink records, per partition,
// the last checkpoint it committed and how many records it has committed
// (its position). The sink creates it if it is missing.
const CheckpointTable = "sluice_sink_checkpoints"

// Defaults of Config's zero fields.
const (
	DefaultMaxPendingRows = 1 << 20
	DefaultTimeout        = 30 * time.Second
)

// Config configures a PostgreSQL sink. DSN, Name, Table, Columns and Row
// are required.
type Config[T any] struct {
	// DSN of the database: postgres://user:password@host:5432/db?sslmode=disable,
	// or host=... port=... dbname=... user=...; the PG* environment
	// variables fill in what it leaves out. Errors name its host, port,
	// database and user, never its password.
	DSN string
	// Name identifies the sink in CheckpointTable: give every job and sink
	// its own, typically "topology/operator", and keep it across runs.
	Name string
	// Table receives the rows ("table" or "schema.table").
	Table string
	// Columns are the columns that Row fills, in order.
	Columns []string
	// Row turns a record into the values of Columns (as pgx encodes them:
	// int64, string, time.Time, []byte, ...).
	Row func(T) []any
	// Key, when set, makes the sink upsert: a row replaces the table's row
	// with the same values in these columns (INSERT ... ON CONFLICT (Key)
	// DO UPDATE SET the other columns), and of the rows of one commit with
	// the same key the last wins. Key needs a unique index on its columns.
	// Default: plain inserts with COPY.
	Key []string
	// MaxPendingRows bounds the rows that wait in memory for a checkpoint
	// to complete; beyond it Write fails the sink. Default
	// DefaultMaxPendingRows.
	MaxPendingRows int
	// FlushRows, when positive, commits the rows every FlushRows records
	// without waiting for a checkpoint: for jobs without checkpoints. See
	// the package documentation for what this does to the guarantee.
	FlushRows int
	// Attempts bounds the attempts of one commit (the first included), and
	// Backoff spaces them (supervision's retry state machine). Default
	// supervision.DefaultMaxAttempts and supervision's default backoff.
	Attempts int
	Backoff  supervision.Backoff
	// Timeout bounds one attempt (connecting included). Default
	// DefaultTimeout.
	Timeout time.Duration
}

// Stats are a sink's counters, summed over its partitions.
type Stats struct {
	Commits     int64 // transactions that wrote rows
	Rows        int64 // rows written by them
	SkippedRows int64 // rows not written because the table already had them (a replay)
	Failures    int64 // attempts that failed (each is retried or fails the sink)
	Retries     int64 // attempts made again after a failure
	Connects    int64 // connections opened
}

// Sink writes records into a PostgreSQL table, committing with the job's
// checkpoints. Create it with NewSink; it is an operators.SinkConnector and
// operators.RestorableSink whose writers are operators.TwoPhaseWriter.
type Sink[T any] struct {
	cfg     Config[T]
	conn    *pgx.ConnConfig
	where   string
	retryer *supervision.Retryer
	err     error
	table   pgx.Identifier
	upsert  string // the upsert statement, with Key

	commits, rows, skipped, failures, retries, connects atomic.Int64
}

// NewSink returns a sink for cfg. An invalid configuration is reported by
// Err, and by Open when the job starts.
func NewSink[T any](cfg Config[T]) *Sink[T] {
	s := &Sink[T]{cfg: cfg}
	var errs []error
	conn, err := parseDSN(cfg.DSN)
	if err != nil {
		errs = append(errs, err)
		s.where = "(no valid DSN)"
	} else {
		s.conn, s.where = conn, describe(conn)
		if _, ok := conn.RuntimeParams["application_name"]; !ok {
			conn.RuntimeParams["application_name"] = "sluice " + cfg.Name // visible in pg_stat_activity
		}
	}
	switch {
	case cfg.Name == "":
		errs = append(errs, errors.New("no Name: it identifies the sink in "+CheckpointTable))
	case cfg.Table == "":
		errs = append(errs, errors.New("no Table"))
	case len(cfg.Columns) == 0:
		errs = append(errs, errors.New("no Columns"))
	case cfg.Row == nil:
		errs = append(errs, errors.New("no Row function"))
	case cfg.MaxPendingRows < 0 || cfg.FlushRows < 0 || cfg.Timeout < 0:
		errs = append(errs, errors.New("negative MaxPendingRows, FlushRows or Timeout"))
	}
	for _, k := range cfg.Key {
		if !contains(cfg.Columns, k) {
			errs = append(errs, fmt.Errorf("key column %q is not among the Columns", k))
		}
	}
	if s.cfg.MaxPendingRows == 0 {
		s.cfg.MaxPendingRows = DefaultMaxPendingRows
	}
	if s.cfg.Timeout == 0 {
		s.cfg.Timeout = DefaultTimeout
	}
	if s.cfg.Attempts == 0 {
		s.cfg.Attempts = supervision.DefaultMaxAttempts
	}
	s.table = pgx.Identifier(strings.Split(cfg.Table, "."))
	if len(cfg.Key) > 0 {
		s.upsert = upsertSQL(s.table, cfg.Columns, cfg.Key)
	}
	r, err := supervision.NewRetryer(
		supervision.WithMaxAttempts(s.cfg.Attempts),
		supervision.WithRetryBackoff(s.cfg.Backoff),
		supervision.WithRetryable(retryable),
		supervision.WithOnRetry(func(int, time.Duration, error) { s.retries.Add(1) }))
	if err != nil {
		errs = append(errs, err)
	}
	s.retryer = r
	if len(errs) > 0 {
		s.err = fmt.Errorf("postgres sink %q at %s: %w", cfg.Name, s.where, errors.Join(errs...))
	}
	return s
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func upsertSQL(table pgx.Identifier, cols, key []string) string {
	quoted := make([]string, len(cols))
	var set []string
	for i, c := range cols {
		quoted[i] = pgx.Identifier{c}.Sanitize()
		if !contains(key, c) {
			set = append(set, quoted[i]+" = EXCLUDED."+quoted[i])
		}
	}
	keys := make([]string, len(key))
	for i, k := range key {
		keys[i] = pgx.Identifier{k}.Sanitize()
	}
	action := "DO NOTHING"
	if len(set) > 0 {
		action = "DO UPDATE SET " + strings.Join(set, ", ")
	}
	list := strings.Join(quoted, ", ")
	return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM sluice_stage ON CONFLICT (%s) %s",
		table.Sanitize(), list, list, strings.Join(keys, ", "), action)
}

// Err reports an invalid configuration (nil if it is valid).
func (s *Sink[T]) Err() error { return s.err }

// Stats returns the sink's counters.
func (s *Sink[T]) Stats() Stats {
	return Stats{Commits: s.commits.Load(), Rows: s.rows.Load(), SkippedRows: s.skipped.Load(),
		Failures: s.failures.Load(), Retries: s.retries.Load(), Connects: s.connects.Load()}
}

// retryable says which errors another attempt may fix: connection
// failures, and the server's transient classes (connection exception,
// transaction rollback such as a serialization failure or deadlock,
// insufficient resources, operator intervention, system error). Any other
// error the server reports (no such table, a constraint violated, a value
// of the wrong type) is permanent.
func retryable(err error) bool {
	if supervision.IsPermanent(err) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code[:2] {
		case "08", "40", "53", "57", "58":
			return true
		}
		return false
	}
	return true
}

// Open implements operators.SinkConnector: it connects and creates
// CheckpointTable if needed. The partition starts at position 0.
func (s *Sink[T]) Open(ctx context.Context, part, parts int) (operators.Writer[T], error) {
	if s.err != nil {
		return nil, s.err
	}
	w := &writer[T]{s: s, ctx: ctx, part: part}
	if err := w.retry(ctx, "connect", func(ctx context.Context) error { _, err := w.connect(ctx); return err }); err != nil {
		return nil, err
	}
	return w, nil
}

// OpenAt implements operators.RestorableSink: it finishes the commit of the
// checkpoint the job restores, if the table does not have it yet, and the
// partition goes on from the checkpoint's position.
func (s *Sink[T]) OpenAt(ctx context.Context, part, parts int, state []byte) (operators.Writer[T], error) {
	if s.err != nil {
		return nil, s.err
	}
	st, err := decodeState[T](state)
	if err != nil {
		return nil, fmt.Errorf("postgres sink %q at %s: partition %d: checkpointed state: %w", s.cfg.Name, s.where, part, err)
	}
	w := &writer[T]{s: s, ctx: ctx, part: part, pos: st.Pos, bufFrom: st.Pos, lastID: st.ID}
	if err := w.retry(ctx, "connect", func(ctx context.Context) error { _, err := w.connect(ctx); return err }); err != nil {
		return nil, err
	}
	if err := w.commit(ctx, st.Segs, st.ID); err != nil {
		w.Abort()
		return nil, err
	}
	return w, nil
}

// segment is the records staged for one checkpoint, from position From.
type segment[T any] struct {
	ID   uint64 `msgpack:"i"`
	From uint64 `msgpack:"f"`
	Recs []T    `msgpack:"r"`
}

func (g *segment[T]) to() uint64 { return g.From + uint64(len(g.Recs)) }

// state is what PreCommit records in a checkpoint.
type state[T any] struct {
	Version int          `msgpack:"v"`
	ID      uint64       `msgpack:"c"` // the checkpoint
	Pos     uint64       `msgpack:"p"` // the position after the last record staged
	Segs    []segment[T] `msgpack:"s"` // staged and not known to be committed
}

const stateVersion = 1

func decodeState[T any](b []byte) (state[T], error) {
	var st state[T]
	// Staged records may hold maps, which decode to several times their
	// encoded size: a larger factor than the default, still bounded.
	if err := msgpacksafe.Decode(b, &st, msgpacksafe.Limits{Source: "sink state", Factor: 32}); err != nil {
		return st, err
	}
	if st.Version != stateVersion {
		return st, fmt.Errorf("version %d, want %d", st.Version, stateVersion)
	}
	for i := 1; i < len(st.Segs); i++ {
		if st.Segs[i].From != st.Segs[i-1].to() {
			return st, fmt.Errorf("segments not contiguous at position %d", st.Segs[i].From)
		}
	}
	return st, nil
}

// writer is one partition. Its methods are called from the partition's
// instance, one at a time.
type writer[T any] struct {
	s    *Sink[T]
	ctx  context.Context
	part int
	conn *pgx.Conn

	pos     uint64       // the position of the next record
	buf     []T          // written since the last PreCommit, from position bufFrom
	bufFrom uint64       //
	segs    []segment[T] // staged, not yet committed
	lastID  uint64       // the last checkpoint staged or restored
}

func (w *writer[T]) where() string {
	return fmt.Sprintf("postgres sink %q at %s: partition %d", w.s.cfg.Name, w.s.where, w.part)
}

func (w *writer[T]) pending() int {
	n := len(w.buf)
	for _, g := range w.segs {
		n += len(g.Recs)
	}
	return n
}

// Write buffers the records until a checkpoint stages them (or FlushRows).
func (w *writer[T]) Write(records []T) error {
	if p := w.pending(); p+len(records) > w.s.cfg.MaxPendingRows {
		return fmt.Errorf("%s: %d rows would wait for a checkpoint, more than MaxPendingRows (%d): "+
			"take checkpoints more often (operators.Checkpoints), raise MaxPendingRows, or set FlushRows for a job without checkpoints",
			w.where(), p+len(records), w.s.cfg.MaxPendingRows)
	}
	w.buf = append(w.buf, records...)
	w.pos += uint64(len(records))
	if f := w.s.cfg.FlushRows; f > 0 && len(w.buf) >= f {
		return w.commitAll()
	}
	return nil
}

// PreCommit implements operators.TwoPhaseWriter: the records written since
// the last checkpoint become the checkpoint's segment, and the state holds
// every segment not yet committed, so that a restore can commit them.
func (w *writer[T]) PreCommit(checkpoint uint64) ([]byte, error) {
	if len(w.buf) > 0 {
		w.segs = append(w.segs, segment[T]{ID: checkpoint, From: w.bufFrom, Recs: w.buf})
		w.buf, w.bufFrom = nil, w.pos
	}
	w.lastID = checkpoint
	b, err := msgpack.Marshal(&state[T]{Version: stateVersion, ID: checkpoint, Pos: w.pos, Segs: w.segs})
	if err != nil {
		return nil, fmt.Errorf("%s: checkpoint %d: encode %d staged records: %w", w.where(), checkpoint, w.pending(), err)
	}
	return b, nil
}

// Commit implements operators.TwoPhaseWriter: it writes the segments of
// every checkpoint up to this one and moves the partition's position in
// CheckpointTable, in one transaction.
func (w *writer[T]) Commit(ctx context.Context, checkpoint uint64) error {
	n := 0
	for n < len(w.segs) && w.segs[n].ID <= checkpoint {
		n++
	}
	if err := w.commit(ctx, w.segs[:n], checkpoint); err != nil {
		return err
	}
	w.segs = append(w.segs[:0], w.segs[n:]...)
	return nil
}

// commitAll commits everything written so far, staged or not, under the
// last checkpoint id.
func (w *writer[T]) commitAll() error {
	segs := w.segs
	if len(w.buf) > 0 {
		segs = append(segs, segment[T]{ID: w.lastID, From: w.bufFrom, Recs: w.buf})
	}
	if err := w.commit(w.ctx, segs, w.lastID); err != nil {
		return err
	}
	w.segs, w.buf, w.bufFrom = nil, nil, w.pos
	return nil
}

// Close commits what is left and disconnects. In a job with checkpoints the
// final checkpoint has committed everything by then; without checkpoints
// this is the only commit of the records since the last FlushRows.
func (w *writer[T]) Close() error {
	err := w.commitAll()
	w.disconnect()
	return err
}

// Abort disconnects without committing: a restore commits the staged
// records from the checkpoint, and replays the others.
func (w *writer[T]) Abort() error {
	w.disconnect()
	return nil
}

func (w *writer[T]) disconnect() {
	if w.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = w.conn.Close(ctx)
		cancel()
		w.conn = nil
	}
}

// retry runs attempt under the sink's retry policy, each attempt within
// Timeout; a failure that may have broken the connection closes it, so the
// next attempt connects again.
func (w *writer[T]) retry(ctx context.Context, what string, attempt func(ctx context.Context) error) error {
	err := w.s.retryer.Do(ctx, func(ctx context.Context) error {
		actx, cancel := context.WithTimeout(ctx, w.s.cfg.Timeout)
		defer cancel()
		err := attempt(actx)
		if err != nil {
			w.s.failures.Add(1)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code[:2] == "08" || pe.Code[:2] == "57" {
				w.disconnect()
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %s: %w", w.where(), what, err)
	}
	return nil
}

// connect returns the partition's connection, opening it (and creating
// CheckpointTable, and the staging table of an upsert) when needed.
func (w *writer[T]) connect(ctx context.Context) (*pgx.Conn, error) {
	if w.conn != nil && !w.conn.IsClosed() {
		return w.conn, nil
	}
	w.conn = nil
	c, err := pgx.ConnectConfig(ctx, w.s.conn.Copy())
	if err != nil {
		return nil, err
	}
	w.s.connects.Add(1)
	if err := ensureCheckpointTable(ctx, c); err != nil {
		c.Close(ctx)
		return nil, err
	}
	if w.s.upsert != "" {
		cols := make([]string, len(w.s.cfg.Columns))
		for i, col := range w.s.cfg.Columns {
			cols[i] = pgx.Identifier{col}.Sanitize()
		}
		q := fmt.Sprintf("CREATE TEMP TABLE IF NOT EXISTS sluice_stage ON COMMIT DELETE ROWS AS SELECT %s FROM %s WITH NO DATA",
			strings.Join(cols, ", "), w.s.table.Sanitize())
		if _, err := c.Exec(ctx, q); err != nil {
			c.Close(ctx)
			return nil, fmt.Errorf("create the staging table for upserts into %s: %w", w.s.table.Sanitize(), err)
		}
	}
	w.conn = c
	return c, nil
}

// checkpointLock is the advisory lock that serialises the creation of
// CheckpointTable (concurrent CREATE TABLE IF NOT EXISTS can fail).
const checkpointLock = 0x5_11CE_C4EC

func ensureCheckpointTable(ctx context.Context, c *pgx.Conn) error {
	return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(checkpointLock)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+CheckpointTable+` (
			sink text NOT NULL,
			part integer NOT NULL,
			checkpoint bigint NOT NULL,
			position bigint NOT NULL DEFAULT 0,
			PRIMARY KEY (sink, part))`)
		if err != nil {
			return fmt.Errorf("create %s: %w", CheckpointTable, err)
		}
		return nil
	})
}

// commit writes the records of segs that the table does not have yet, and
// records the partition's new position and checkpoint, in one transaction.
// The table's position says which records it has: a segment entirely below
// it is skipped (a commit done before a crash, or an earlier run over the
// same input), one that straddles it is written from it on.
func (w *writer[T]) commit(ctx context.Context, segs []segment[T], checkpoint uint64) error {
	if len(segs) == 0 {
		return nil
	}
	from, to := segs[0].From, segs[len(segs)-1].to()
	if from == to {
		return nil
	}
	what := fmt.Sprintf("commit checkpoint %d (records %d to %d)", checkpoint, from, to-1)
	return w.retry(ctx, what, func(ctx context.Context) error {
		c, err := w.connect(ctx)
		if err != nil {
			return err
		}
		return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			pos, err := lockPosition(ctx, tx, w.s.cfg.Name, w.part)
			if err != nil {
				return err
			}
			switch {
			case pos >= to:
				w.s.skipped.Add(int64(to - from))
				return nil
			case pos < from:
				return supervision.Permanent(fmt.Errorf("%s records %d of the partition, but this commit starts at record %d: "+
					"records are missing (was the row of sink %q changed, or does another job use its name?)", CheckpointTable, pos, from, w.s.cfg.Name))
			}
			rows, err := w.rowsFrom(segs, pos)
			if err != nil {
				return err
			}
			if err := w.write(ctx, tx, rows); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "UPDATE "+CheckpointTable+" SET checkpoint = $3, position = $4 WHERE sink = $1 AND part = $2",
				w.s.cfg.Name, w.part, int64(checkpoint), int64(to)); err != nil {
				return err
			}
			w.s.commits.Add(1)
			w.s.rows.Add(int64(to - pos))
			w.s.skipped.Add(int64(pos - from))
			return nil
		})
	})
}

// lockPosition reads the partition's position, creating its row if needed,
// and locks the row until the transaction ends.
func lockPosition(ctx context.Context, tx pgx.Tx, sink string, part int) (uint64, error) {
	const q = "SELECT position FROM " + CheckpointTable + " WHERE sink = $1 AND part = $2 FOR UPDATE"
	var pos int64
	err := tx.QueryRow(ctx, q, sink, part).Scan(&pos)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := tx.Exec(ctx, "INSERT INTO "+CheckpointTable+" (sink, part, checkpoint, position) VALUES ($1, $2, 0, 0) ON CONFLICT DO NOTHING", sink, part); err != nil {
			return 0, err
		}
		err = tx.QueryRow(ctx, q, sink, part).Scan(&pos)
	}
	if err != nil {
		return 0, fmt.Errorf("read the position of sink %q partition %d: %w", sink, part, err)
	}
	return uint64(pos), nil
}

// rowsFrom turns the records of segs from position pos on into rows.
func (w *writer[T]) rowsFrom(segs []segment[T], pos uint64) ([][]any, error) {
	var rows [][]any
	ncol := len(w.s.cfg.Columns)
	for _, g := range segs {
		if g.to() <= pos {
			continue
		}
		start := uint64(0)
		if g.From < pos {
			start = pos - g.From
		}
		for i, r := range g.Recs[start:] {
			row := w.s.cfg.Row(r)
			if len(row) != ncol {
				return nil, supervision.Permanent(fmt.Errorf("record %d: Row gave %d values for %d columns", g.From+start+uint64(i), len(row), ncol))
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// write inserts rows with COPY, or upserts them through the staging table.
func (w *writer[T]) write(ctx context.Context, tx pgx.Tx, rows [][]any) error {
	if w.s.upsert == "" {
		if _, err := tx.CopyFrom(ctx, w.s.table, w.s.cfg.Columns, pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("copy %d rows into %s: %w", len(rows), w.s.table.Sanitize(), err)
		}
		return nil
	}
	rows = lastPerKey(rows, w.s.cfg.Columns, w.s.cfg.Key)
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"sluice_stage"}, w.s.cfg.Columns, pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("copy %d rows to stage them for %s: %w", len(rows), w.s.table.Sanitize(), err)
	}
	if _, err := tx.Exec(ctx, w.s.upsert); err != nil {
		return fmt.Errorf("upsert %d rows into %s: %w", len(rows), w.s.table.Sanitize(), err)
	}
	return nil
}

// lastPerKey keeps, of the rows with the same key, the last (ON CONFLICT
// cannot update one row twice in a statement), in the order of their last
// occurrence.
func lastPerKey(rows [][]any, cols, key []string) [][]any {
	idx := make([]int, len(key))
	for i, k := range key {
		for j, c := range cols {
			if c == k {
				idx[i] = j
			}
		}
	}
	lastAt := make(map[string]int, len(rows))
	keys := make([]string, len(rows))
	var b []byte
	for i, r := range rows {
		b = b[:0]
		for _, j := range idx {
			b = fmt.Appendf(b, "%T:%v\x00", r[j], r[j])
		}
		keys[i] = string(b)
		lastAt[keys[i]] = i
	}
	if len(lastAt) == len(rows) {
		return rows
	}
	out := make([][]any, 0, len(lastAt))
	for i, r := range rows {
		if lastAt[keys[i]] == i {
			out = append(out, r)
		}
	}
	return out
}

// Position is what CheckpointTable records for one partition of a sink.
type Position struct {
	Part       int
	Checkpoint uint64 // the checkpoint of the last commit
	Records    uint64 // how many records of the partition the table has
}

// Positions reads what CheckpointTable records for the sink called name,
// by partition.
func Positions(ctx context.Context, dsn, name string) ([]Position, error) {
	cfg, err := parseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: sink %q: %w", name, err)
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: sink %q at %s: %w", name, describe(cfg), err)
	}
	defer c.Close(ctx)
	if err := ensureCheckpointTable(ctx, c); err != nil {
		return nil, fmt.Errorf("postgres: sink %q at %s: %w", name, describe(cfg), err)
	}
	rows, err := c.Query(ctx, "SELECT part, checkpoint, position FROM "+CheckpointTable+" WHERE sink = $1 ORDER BY part", name)
	if err != nil {
		return nil, fmt.Errorf("postgres: sink %q at %s: %w", name, describe(cfg), err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Position, error) {
		var p Position
		var cp, pos int64
		err := r.Scan(&p.Part, &cp, &pos)
		p.Checkpoint, p.Records = uint64(cp), uint64(pos)
		return p, err
	})
}

// Reset forgets the positions of the sink called name, so that its next
// run from scratch writes every record again (rows already in the table
// stay).
func Reset(ctx context.Context, dsn, name string) error {
	cfg, err := parseDSN(dsn)
	if err != nil {
		return fmt.Errorf("postgres: reset sink %q: %w", name, err)
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("postgres: reset sink %q at %s: %w", name, describe(cfg), err)
	}
	defer c.Close(ctx)
	if err := ensureCheckpointTable(ctx, c); err != nil {
		return fmt.Errorf("postgres: reset sink %q at %s: %w", name, describe(cfg), err)
	}
	if _, err := c.Exec(ctx, "DELETE FROM "+CheckpointTable+" WHERE sink = $1", name); err != nil {
		return fmt.Errorf("postgres: reset sink %q at %s: %w", name, describe(cfg), err)
	}
	return nil
}
