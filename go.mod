module dedup

go 1.26.0

require (
	github.com/alecthomas/kong v1.17.0
	github.com/mattn/go-sqlite3 v1.14.53
	golang.org/x/text v0.44.0
	gotest.tools/v3 v3.5.2
)

require github.com/google/go-cmp v0.5.9 // indirect
