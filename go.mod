module dedup

go 1.26.8

require (
	github.com/alecthomas/kong v1.17.0 // indirect
	github.com/google/go-cmp v0.5.9 // indirect
	github.com/mattn/go-sqlite3 v1.14.53 // indirect
	golang.org/x/text v0.44.0 // indirect
	gotest.tools/v3 v3.5.2 // indirect
)
