package postgres

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Describe names the server and database of a DSN for messages and logs:
// "host:port/database as user", never the password. A DSN that does not
// parse is described as such, without its text (it may hold a password).
func Describe(dsn string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	return describe(cfg)
}

func describe(cfg *pgx.ConnConfig) string {
	host := cfg.Host
	if strings.HasPrefix(host, "/") {
		host = "unix:" + host
	} else {
		host += ":" + strconv.Itoa(int(cfg.Port))
	}
	return fmt.Sprintf("%s/%s as %s", host, cfg.Database, cfg.User)
}

// parseDSN parses a DSN (a postgres:// URL or key=value pairs, with the
// PG* environment variables for what it leaves out). Its error never
// quotes the DSN.
func parseDSN(dsn string) (*pgx.ConnConfig, error) {
	if dsn == "" {
		return nil, errors.New("no DSN")
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, errors.New("the DSN does not parse (it is not shown: it may hold a password); " +
			"want postgres://user[:password]@host:port/database?sslmode=... or host=... port=... dbname=... user=...")
	}
	return cfg, nil
}
