module dedup

go 1.26.0

require (
	github.com/alecthomas/kong v1.17.0
	github.com/mattn/go-sqlite3 v1.14.53
	golang.org/x/text v0.44.0
	gotest.tools/v3 v3.5.2
)

require (
	github.com/google/go-cmp v0.5.9 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/pgx/v5 v5.13.0 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	golang.org/x/crypto v0.37.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.32.0 // indirect
)
