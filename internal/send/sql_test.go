package send_test

import "strings"

// pgAgo turns the tests' AGO(n) into PostgreSQL's dialect.
var pgAgo = strings.NewReplacer("AGO(120)", "now() - interval '120 seconds'", "AGO(30)", "now() - interval '30 seconds'")
